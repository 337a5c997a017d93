#!/usr/bin/python3
"""raw_tls.py - NBD_OPT_STARTTLS byte by byte (doc/proto.md, "TLS support").

    raw_tls.py --uri nbd://127.0.0.1:PORT/dimm0 --ca DIR/ca-cert.pem \
        [--client-cert C --client-key K] --mode required|allowed \
        [--tls-only-export NAME] [--plain-export NAME]

required (FORCEDTLS): every option before STARTTLS but ABORT gets
NBD_REP_ERR_TLS_REQD after its data was read (the stream stays in sync:
the next option is parsed right), an oversized option too; EXPORT_NAME
before TLS closes; ABORT is acked.  Then STARTTLS -> ACK, the TLS handshake
(Python's ssl, verifying the server against the CA), and under TLS: a second
STARTTLS -> ERR_INVALID, LIST, GO, a WRITE and a READ of it.
allowed (SELECTIVETLS): options work before STARTTLS; an export with
tls = required is refused with ERR_TLS_REQD (INFO, GO), with ERR_POLICY
(LIST/SET_META_CONTEXT: the spec allows TLS_REQD for INFO, GO and
EXPORT_NAME only) and hidden from LIST until TLS is up; STRUCTURED_REPLY negotiated before STARTTLS is
forgotten after it (SET_META_CONTEXT -> ERR_INVALID until it is sent again).
"""
import argparse
import os
import socket
import ssl
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nbdraw import *  # noqa: E402,F401,F403

failures = []


def check(cond, msg):
    if cond:
        print("ok   %s" % msg)
    else:
        print("FAIL %s" % msg)
        failures.append(msg)


def final(c, opt, data=b""):
    reps = c.final_reply(opt, data)
    return reps[-1][0], reps


def list_names(reps):
    out = []
    for t, d in reps[:-1]:
        if t == REP_SERVER:
            n = struct.unpack(">I", d[:4])[0]
            out.append(d[4:4 + n].decode())
    return out


def starttls(c, args):
    t, reps = final(c, OPT_STARTTLS)
    check(t == REP_ACK, "STARTTLS -> %s, want ACK" % repname(t))
    if t != REP_ACK:
        raise SystemExit(1)
    ctx = ssl.create_default_context(cafile=args.ca)
    if args.client_cert:
        ctx.load_cert_chain(args.client_cert, args.client_key)
    c.sock = ctx.wrap_socket(c.sock, server_hostname="localhost")
    print("     TLS up: %s %s" % (c.sock.version(), c.sock.cipher()[0]))


def under_tls(c, args, export):
    t, _ = final(c, OPT_STARTTLS)
    check(t == REP_ERR_INVALID, "second STARTTLS under TLS -> %s, want ERR_INVALID" % repname(t))
    t, reps = final(c, OPT_LIST)
    names = list_names(reps)
    check(t == REP_ACK and export in names, "LIST under TLS -> %s %s" % (repname(t), names))
    if args.tls_only_export:
        check(args.tls_only_export in names, "LIST under TLS shows the TLS-only export")
    if args.plain_export:
        check(args.plain_export not in names, "LIST under TLS hides the plaintext-only export")
        t, _, _ = c.info(OPT_INFO, args.plain_export, (INFO_BLOCK_SIZE,))
        check(t == REP_ERR_POLICY, "INFO on the plaintext-only export under TLS -> %s, want "
              "ERR_POLICY" % repname(t))
    size, tflags = c.go(export)
    check(size > 0, "GO under TLS: size %d" % size)
    data = os.urandom(65536)
    c.request(CMD_WRITE, 0, handle=1, offset=1 << 20, payload=data)
    r = c.reply_for(1)
    check(r.error == 0, "WRITE under TLS -> %s" % errname(r.error))
    c.request(CMD_READ, 0, handle=2, offset=1 << 20, length=len(data))
    r = c.reply_for(2)
    got = r.data if not r.structured else b"".join(
        p[8:] for f, typ, p in r.chunks if typ == RT_OFFSET_DATA)
    check(r.error == 0 and got == data, "READ under TLS returns what was written")
    c.request(CMD_DISC, 0, handle=3, offset=0, length=0)
    c.close()


def required(args):
    fam, addr, export = parse_uri(args.uri)

    c = Conn(fam, addr, export)
    c.handshake()
    # every option before STARTTLS: ERR_TLS_REQD, its data consumed
    for opt, data, what in [
            (OPT_LIST, b"", "LIST"),
            (OPT_STRUCTURED_REPLY, b"", "STRUCTURED_REPLY"),
            (OPT_INFO, Conn.info_data(export, (INFO_BLOCK_SIZE,)), "INFO"),
            (OPT_GO, Conn.info_data(export, (INFO_BLOCK_SIZE,)), "GO"),
            (OPT_SET_META_CONTEXT, Conn.meta_data(export, ["base:allocation"]), "SET_META_CONTEXT"),
            (OPT_LIST_META_CONTEXT, Conn.meta_data(export, []), "LIST_META_CONTEXT"),
            (99, b"x" * 1000, "unknown option 99 with 1000 bytes"),
            (OPT_INFO, b"\x00" * 3, "malformed INFO"),
            (OPT_GO, b"\xff" * (100 << 10), "GO with 100 KiB of data (over the option limit)")]:
        t, reps = final(c, opt, data)
        check(t == REP_ERR_TLS_REQD and len(reps) == 1,
              "%s before STARTTLS -> %s, want ERR_TLS_REQD only" % (what, repname(t)))
    # the stream is still in sync: TLS now
    starttls(c, args)
    # everything before is forgotten, nothing was negotiated anyway
    under_tls(c, args, export)

    # EXPORT_NAME before TLS: no error path, the connection closes
    c = Conn(fam, addr, export)
    c.handshake()
    c.option(OPT_EXPORT_NAME, export.encode())
    closed, got = c.expect_silence_then_close(5)
    check(closed and not got, "EXPORT_NAME before TLS closes the connection (got %d bytes)" % len(got))
    c.close()

    # ABORT before TLS is acked
    c = Conn(fam, addr, export)
    c.handshake()
    t, _ = final(c, OPT_ABORT)
    check(t == REP_ACK, "ABORT before TLS -> %s, want ACK" % repname(t))
    c.close()

    # STARTTLS with data: ERR_INVALID, still in sync
    c = Conn(fam, addr, export)
    c.handshake()
    t, _ = final(c, OPT_STARTTLS, b"junk")
    check(t == REP_ERR_INVALID, "STARTTLS with data -> %s, want ERR_INVALID" % repname(t))
    starttls(c, args)
    under_tls(c, args, export)


def allowed(args):
    fam, addr, export = parse_uri(args.uri)
    c = Conn(fam, addr, export)
    c.handshake()
    t, reps = final(c, OPT_LIST)
    names = list_names(reps)
    check(t == REP_ACK and export in names, "LIST without TLS -> %s %s" % (repname(t), names))
    if args.tls_only_export:
        check(args.tls_only_export not in names, "LIST without TLS hides the TLS-only export")
        for opt, what in [(OPT_INFO, "INFO"), (OPT_GO, "GO")]:
            t, _, reps = c.info(opt, args.tls_only_export, (INFO_BLOCK_SIZE,))
            check(t == REP_ERR_TLS_REQD and len(reps) == 1,
                  "%s on the TLS-only export without TLS -> %s, want ERR_TLS_REQD" % (what, repname(t)))
    t, _, _ = c.info(OPT_INFO, export, (INFO_BLOCK_SIZE,))
    check(t == REP_ACK, "INFO on %s without TLS -> %s" % (export, repname(t)))
    c.structured_reply()
    if args.tls_only_export:
        # TLS_REQD is for INFO, GO and EXPORT_NAME only (the NBD spec):
        # the META_CONTEXT options on a TLS-only export get POLICY
        for opt, what, q in [(OPT_LIST_META_CONTEXT, "LIST_META_CONTEXT", []),
                             (OPT_SET_META_CONTEXT, "SET_META_CONTEXT", ["base:allocation"])]:
            t, reps = final(c, opt, Conn.meta_data(args.tls_only_export, q))
            check(t == REP_ERR_POLICY and len(reps) == 1,
                  "%s on the TLS-only export without TLS -> %s, want ERR_POLICY only" % (what, repname(t)))
    t, _ = final(c, OPT_SET_META_CONTEXT, Conn.meta_data(export, ["base:allocation"]))
    check(t == REP_ACK, "SET_META_CONTEXT after STRUCTURED_REPLY without TLS -> %s" % repname(t))
    starttls(c, args)
    # forgotten: structured replies must be negotiated again
    t, _ = final(c, OPT_SET_META_CONTEXT, Conn.meta_data(export, ["base:allocation"]))
    check(t == REP_ERR_INVALID, "SET_META_CONTEXT under TLS before STRUCTURED_REPLY again -> %s, "
          "want ERR_INVALID (state before STARTTLS forgotten)" % repname(t))
    c.structured = False
    target = args.tls_only_export or export
    under_tls(c, args, target)

    if args.tls_only_export:
        c = Conn(fam, addr, export)
        c.handshake()
        c.option(OPT_EXPORT_NAME, args.tls_only_export.encode())
        closed, got = c.expect_silence_then_close(5)
        check(closed and not got, "EXPORT_NAME of the TLS-only export without TLS closes")
        c.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--uri", required=True)
    ap.add_argument("--ca", required=True)
    ap.add_argument("--client-cert")
    ap.add_argument("--client-key")
    ap.add_argument("--mode", choices=["required", "allowed"], required=True)
    ap.add_argument("--tls-only-export")
    ap.add_argument("--plain-export")
    args = ap.parse_args()
    (required if args.mode == "required" else allowed)(args)
    if failures:
        print("%d check(s) failed" % len(failures))
        sys.exit(1)
    print("all checks passed")


if __name__ == "__main__":
    main()
