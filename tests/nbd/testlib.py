"""testlib.py - shared bits of the Python NBD checks in tests/nbd/.

Checks run in named sections; a failing section is reported (with the
exception) and the script carries on with the next one, so one run shows
every failure.  Each section has a watchdog: if it does not finish in time
the whole script reports a hang and exits, so a server that stops
answering fails the test instead of stalling it.
"""
import os
import sys
import threading
import time
import traceback

import nbd

_failures = []
_current = [None]
VERBOSE = os.environ.get("NBD_TEST_VERBOSE") == "1"


def log(msg):
    print(msg, flush=True)


class CheckFailed(AssertionError):
    pass


def check(cond, msg):
    if not cond:
        raise CheckFailed(msg)


def _hang(name, timeout):
    log("FAIL %s: no progress within %d s (the server stopped answering?)" % (name, timeout))
    log("%d earlier failure(s): %s" % (len(_failures), ", ".join(_failures)))
    sys.stdout.flush()
    os._exit(3)


class section:
    """with section("name"): ...  - reports ok/FAIL, never raises."""

    def __init__(self, name, timeout=60):
        self.name = name
        self.timeout = timeout

    def __enter__(self):
        self.t0 = time.monotonic()
        self.timer = threading.Timer(self.timeout, _hang, (self.name, self.timeout))
        self.timer.daemon = True
        self.timer.start()
        _current[0] = self.name
        return self

    def __exit__(self, et, ev, tb):
        self.timer.cancel()
        dt = time.monotonic() - self.t0
        if et is None:
            log("ok   %s (%.2f s)" % (self.name, dt))
            return False
        _failures.append(self.name)
        if isinstance(ev, CheckFailed):
            log("FAIL %s: %s" % (self.name, ev))
        else:
            log("FAIL %s: %s: %s" % (self.name, et.__name__, ev))
            if VERBOSE:
                traceback.print_exception(et, ev, tb, file=sys.stdout)
            else:
                # the innermost frame of the test script, for orientation
                frames = [f for f in traceback.extract_tb(tb) if f.filename.endswith(".py")]
                if frames:
                    f = frames[-1]
                    log("     at %s:%d: %s" % (os.path.basename(f.filename), f.lineno, f.line))
        return True  # swallow: go on with the next section


def finish():
    if _failures:
        log("%d check group(s) failed: %s" % (len(_failures), ", ".join(_failures)))
        sys.exit(1)
    log("all checks passed")
    sys.exit(0)


# ---- libnbd helpers -------------------------------------------------------

def connect(uri, structured=True, meta=(nbd.CONTEXT_BASE_ALLOCATION,), strict=None,
            full_info=False, name=None):
    h = nbd.NBD()
    if name:
        h.set_handle_name(name)
    h.set_request_structured_replies(structured)
    for m in meta:
        h.add_meta_context(m)
    if full_info:
        h.set_full_info(True)
    if strict is not None:
        h.set_strict_mode(strict)
    h.connect_uri(uri)
    return h


def outcome(fn, *args, **kw):
    """Run a libnbd call: "OK" or the errno name of the nbd.Error."""
    try:
        fn(*args, **kw)
        return "OK"
    except nbd.Error as e:
        return e.errno or ("errnum %s" % e.errnum)


def expect_err(want, fn, *args, **kw):
    """The call must fail with one of the errno names in want (str or
    tuple); returns the outcome."""
    if isinstance(want, str):
        want = (want,)
    got = outcome(fn, *args, **kw)
    check(got in want, "%s(%s) -> %s, want %s" % (
        getattr(fn, "__name__", fn), ", ".join(_short(a) for a in args), got, "/".join(want)))
    return got


def _short(a):
    if isinstance(a, (bytes, bytearray)):
        return "<%d bytes>" % len(a)
    return repr(a)


def pattern(seed, n):
    """Deterministic non-zero test data (n bytes)."""
    import hashlib
    out = bytearray()
    i = 0
    while len(out) < n:
        out += hashlib.sha256(b"%d:%d" % (seed, i)).digest()
        i += 1
    return bytes(out[:n])


def extents(h, count, offset, flags=0, ctx=nbd.CONTEXT_BASE_ALLOCATION):
    """block_status -> list of (length, flags) for ctx."""
    got = {}

    def cb(metacontext, off, entries, err):
        got.setdefault(metacontext, []).append((off, list(entries)))
        return 0
    h.block_status(count, offset, cb, flags)
    check(ctx in got, "no extents for %s in the block status reply" % ctx)
    check(len(got[ctx]) == 1, "%d block status chunks for %s" % (len(got[ctx]), ctx))
    off, e = got[ctx][0]
    check(off == offset, "block status extents start at %d, want %d" % (off, offset))
    return [(e[i], e[i + 1]) for i in range(0, len(e), 2)]


def status_at(h, offset, length, flags=0):
    """The status flags covering [offset, offset+length): a list of
    (start, length, flags) clipped to the range, walking the export with
    as many block status calls as needed."""
    out = []
    pos, end = offset, offset + length
    while pos < end:
        ext = extents(h, end - pos, pos, flags)
        for n, st in ext:
            if pos >= end:
                break
            n2 = min(n, end - pos)
            out.append((pos, n2, st))
            pos += n2
    return out


def aio_wait(h, cookies, timeout=30):
    """Poll until every command in cookies is complete; raise on timeout."""
    end = time.monotonic() + timeout
    left = set(cookies)
    while left:
        if time.monotonic() > end:
            raise CheckFailed("%d of %d commands still in flight after %d s" % (len(left), len(cookies), timeout))
        h.poll(1)
        for c in list(left):
            if h.aio_command_completed(c):
                left.discard(c)


def alive(uri, offset=None, tag="alive"):
    """The server still serves: a fresh connection writes 64 KiB and reads
    it back (within a watchdog)."""
    h = connect(uri, name=tag)
    try:
        size = h.get_size()
        if offset is None:
            offset = size - (1 << 20)
        data = os.urandom(65536)
        h.pwrite(data, offset)
        check(h.pread(65536, offset) == data, "%s: read back differs from what was written" % tag)
    finally:
        h.shutdown()
