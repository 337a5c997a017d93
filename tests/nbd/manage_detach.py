#!/usr/bin/python3
"""manage_detach.py - `detach` drains an export (tests/test-manage.sh).

  manage_detach.py --ctl SOCK --uri URI --count 32 --data-out FILE

On an export whose NAND timing model is on (so writes take time): one idle
connection, and one that pipelines COUNT 1 MiB FUA WRITEs (random data, at
offset i MiB).  Then POST /v1/dimms/NAME/detach?force=yes (the idle
connection would make a plain detach refused) while they are in flight;
once the ioDimm says "detaching", 4 more WRITEs and a FLUSH on the same
connection.  Checks: while it drains a new NBD_OPT_GO is refused with
NBD_REP_ERR_UNKNOWN and a message saying so; every request sent gets its
reply, in order of nothing (no reset): those flashd had read before the
detach succeed (all of them, unless flashd was slow to read them), those
after it fail with NBD_ESHUTDOWN; then flashd closes both connections
(FIN); the detach answers ok; afterwards a GO is refused with a message
naming `flashctl attach`, and NBD_OPT_LIST does not list the export.
FILE gets what the export must hold at [0, COUNT MiB): the data of the
WRITEs that succeeded, zeros for the others (the range was never written).
"""
import argparse
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ctlclient  # noqa: E402
import nbdraw  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--ctl", required=True)
ap.add_argument("--uri", required=True)
ap.add_argument("--count", type=int, default=32)
ap.add_argument("--data-out", required=True)
args = ap.parse_args()
MiB = 1 << 20
name = nbdraw.parse_uri(args.uri)[2]
failures = []


def fail(msg):
    print("FAIL " + msg, flush=True)
    failures.append(msg)


def go_refused(*expect):
    """A new client's GO: must be NBD_REP_ERR_UNKNOWN with one of expect in the message."""
    c = nbdraw.Conn.open(args.uri)
    try:
        c.handshake()
        final, _, reps = c.info(nbdraw.OPT_GO, name, (nbdraw.INFO_BLOCK_SIZE,))
        msg = reps[-1][1].decode(errors="replace")
        if final != nbdraw.REP_ERR_UNKNOWN:
            fail("GO to %s: %s, want NBD_REP_ERR_UNKNOWN" % (name, nbdraw.repname(final)))
        elif not any(e in msg for e in expect):
            fail("GO to %s refused with %r, which does not say %s" % (name, msg, " or ".join(map(repr, expect))))
        else:
            print("new client refused: NBD_REP_ERR_UNKNOWN %r" % msg)
        return msg
    finally:
        c.close()


def listed():
    c = nbdraw.Conn.open(args.uri)
    try:
        c.handshake()
        reps = c.final_reply(nbdraw.OPT_LIST)
        names = []
        for t, d in reps[:-1]:
            n = int.from_bytes(d[:4], "big")
            names.append(d[4:4 + n].decode())
        return names
    finally:
        c.close()


idle = nbdraw.Conn.open(args.uri)
idle.handshake()
idle.go()
c = nbdraw.Conn.open(args.uri, timeout=60)
c.handshake()
c.go()
extra = 4
data = bytearray(os.urandom((args.count + extra) * MiB))
# FUA: each completes when programmed, so the drain has requests to wait for
for i in range(args.count):
    c.request(nbdraw.CMD_WRITE, flags=nbdraw.CMD_FLAG_FUA, handle=i + 1, offset=i * MiB,
              payload=bytes(data[i * MiB:(i + 1) * MiB]))
t0 = time.monotonic()
result = {}


def detach():
    result["reply"] = ctlclient.post(args.ctl, "/v1/dimms/%s/detach?force=yes" % name)
    result["t"] = time.monotonic() - t0


th = threading.Thread(target=detach)
th.start()
# while it drains
seen = None
end = time.monotonic() + 10
while time.monotonic() < end and th.is_alive():
    st = ctlclient.get_json(args.ctl, "/v1/dimms/" + name)
    if st["state"] == "detaching":
        seen = st
        break
    time.sleep(0.005)
if seen and seen["connections"] == 0:
    # a loaded machine: the drain was over (both connections closed)
    # before this poll saw the state; nothing can be sent any more
    print("during the drain: state %s, 0 connections: the drain finished before the first "
          "status poll saw it; requests after the detach not tried this time" % seen["state"])
    seen = None
    extra = 0
elif seen:
    print("during the drain: state %s, %d connection(s)" % (seen["state"], seen["connections"]))
    # flashd closes a drained connection once nothing is in flight or
    # unread, so a request sent now may find it closed: what was sent
    # before that must still be answered
    sent = 0
    try:
        for i in range(args.count, args.count + extra):
            c.request(nbdraw.CMD_WRITE, handle=i + 1, offset=i * MiB,
                      payload=bytes(data[i * MiB:(i + 1) * MiB]))
            sent += 1
        c.request(nbdraw.CMD_FLUSH, handle=1000)
    except nbdraw.Closed as e:
        print("flashd had closed the drained connection after %d more request(s): %s" % (sent, e))
        extra = sent
        seen = None  # no FLUSH to wait for
    if seen:
        go_refused("detaching")
    else:
        go_refused("detaching", "detached")  # the detach may be over by now
else:
    if th.is_alive():
        fail("never saw %s detaching in 10 s" % name)
    else:
        print("the detach was over before the first status poll (a loaded machine); requests "
              "after the detach not tried this time")
    extra = 0
ok_writes, shut = [], []
for h in list(range(1, args.count + extra + 1)) + ([1000] if seen else []):
    try:
        r = c.reply_for(h)
    except nbdraw.Closed as e:
        if h <= args.count:
            fail("connection closed before the reply to request %d: %s" % (h, e))
        else:
            # sent while the drain closed the connection: flashd never
            # read it (the close raced with its arrival)
            print("request %d (sent while detaching) got no reply: the drain had closed the "
                  "connection (%s)" % (h, e))
            extra = min(extra, h - 1 - args.count)
            seen = None
        break
    if r.error == 0 and h != 1000:
        ok_writes.append(h - 1)
    elif r.error == nbdraw.ESHUTDOWN:
        shut.append(h)
    elif r.error:
        fail("request %d answered with %s" % (h, nbdraw.errname(r.error)))
late = [h for h in shut if h != 1000 and h <= args.count]
print("%d WRITEs succeeded, %d answered ESHUTDOWN (%d of them sent before the detach: flashd had "
      "not read them yet)" % (len(ok_writes), len(shut), len(late)))
if not all(h in shut for h in list(range(args.count + 1, args.count + extra + 1)) + ([1000] if seen else [])):
    fail("requests sent while detaching were not all answered ESHUTDOWN: %s" % shut)
if late and sorted(late) != list(range(min(late), args.count + 1)):
    fail("ESHUTDOWN for requests before others that succeeded: %s" % late)
if not c.wait_closed(30):
    fail("the connection with the drained WRITEs stayed open")
if not idle.wait_closed(30):
    fail("the idle connection stayed open")
want = bytearray(args.count * MiB)
for i in ok_writes:
    if i < args.count:
        want[i * MiB:(i + 1) * MiB] = data[i * MiB:(i + 1) * MiB]
with open(args.data_out, "wb") as f:
    f.write(want)
th.join(60)
code, reply = result.get("reply", (0, {}))
print("detach answered after %.2f s: HTTP %d %s" % (result.get("t", -1), code, reply))
if code != 200 or not reply.get("ok") or reply.get("state") != "detached":
    fail("detach: HTTP %d %s" % (code, reply))
st = ctlclient.get_json(args.ctl, "/v1/dimms/" + name)
if st["state"] != "detached" or st["attached"] or st["connections"]:
    fail("after the detach: %s" % {k: st[k] for k in ("state", "attached", "connections")})
go_refused("flashctl attach %s" % name)
names = listed()
print("NBD_OPT_LIST: %s" % names)
if name in names:
    fail("NBD_OPT_LIST still lists %s" % name)
if failures:
    sys.exit(1)
print("ok: detach drained the connections (every request answered) and refuses new ones")
