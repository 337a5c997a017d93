"""nbdraw.py - speak the NBD protocol by hand (fixed newstyle, no TLS).

A small client library for the raw-socket tests in tests/nbd/: it sends
exactly the bytes a test asks for and parses what comes back strictly, so
tests can check the server against doc/proto.md of NetworkBlockDevice/nbd
(option and reply framing, simple and structured replies, handles) and
send malformed input that real clients never would.

    c = Conn.open("nbd://127.0.0.1:10809/dimm0")       # or nbd+unix:///x?socket=P
    c.handshake()                                       # greeting + client flags
    c.option(OPT_STRUCTURED_REPLY); c.final_reply(OPT_STRUCTURED_REPLY)
    size, tflags = c.go("dimm0")
    c.request(CMD_READ, 0, handle=7, offset=0, length=4096)
    r = c.reply_for(7)      # Reply: .error, .data, .chunks
"""
import os
import socket
import struct
import time
import urllib.parse

NBDMAGIC = 0x4E42444D41474943
IHAVEOPT = 0x49484156454F5054
REP_MAGIC = 0x0003E889045565A9
REQUEST_MAGIC = 0x25609513
SIMPLE_REPLY_MAGIC = 0x67446698
STRUCTURED_REPLY_MAGIC = 0x668E33EF

FLAG_FIXED_NEWSTYLE = 1
FLAG_NO_ZEROES = 2
FLAG_C_FIXED_NEWSTYLE = 1
FLAG_C_NO_ZEROES = 2

OPT_EXPORT_NAME = 1
OPT_ABORT = 2
OPT_LIST = 3
OPT_PEEK_EXPORT = 4
OPT_STARTTLS = 5
OPT_INFO = 6
OPT_GO = 7
OPT_STRUCTURED_REPLY = 8
OPT_LIST_META_CONTEXT = 9
OPT_SET_META_CONTEXT = 10
OPT_EXTENDED_HEADERS = 11

REP_ACK = 1
REP_SERVER = 2
REP_INFO = 3
REP_META_CONTEXT = 4
REP_ERR_UNSUP = 0x80000001
REP_ERR_POLICY = 0x80000002
REP_ERR_INVALID = 0x80000003
REP_ERR_PLATFORM = 0x80000004
REP_ERR_TLS_REQD = 0x80000005
REP_ERR_UNKNOWN = 0x80000006
REP_ERR_SHUTDOWN = 0x80000007
REP_ERR_BLOCK_SIZE_REQD = 0x80000008
REP_ERR_TOO_BIG = 0x80000009

INFO_EXPORT = 0
INFO_NAME = 1
INFO_DESCRIPTION = 2
INFO_BLOCK_SIZE = 3

TF_HAS_FLAGS = 1 << 0
TF_READ_ONLY = 1 << 1
TF_SEND_FLUSH = 1 << 2
TF_SEND_FUA = 1 << 3
TF_ROTATIONAL = 1 << 4
TF_SEND_TRIM = 1 << 5
TF_SEND_WRITE_ZEROES = 1 << 6
TF_SEND_DF = 1 << 7
TF_CAN_MULTI_CONN = 1 << 8
TF_SEND_RESIZE = 1 << 9
TF_SEND_CACHE = 1 << 10
TF_SEND_FAST_ZERO = 1 << 11

CMD_READ = 0
CMD_WRITE = 1
CMD_DISC = 2
CMD_FLUSH = 3
CMD_TRIM = 4
CMD_CACHE = 5
CMD_WRITE_ZEROES = 6
CMD_BLOCK_STATUS = 7
CMD_RESIZE = 8

CMD_FLAG_FUA = 1 << 0
CMD_FLAG_NO_HOLE = 1 << 1
CMD_FLAG_DF = 1 << 2
CMD_FLAG_REQ_ONE = 1 << 3
CMD_FLAG_FAST_ZERO = 1 << 4

REPLY_FLAG_DONE = 1
RT_NONE = 0
RT_OFFSET_DATA = 1
RT_OFFSET_HOLE = 2
RT_BLOCK_STATUS = 5
RT_ERROR = 0x8001
RT_ERROR_OFFSET = 0x8002

EPERM = 1
EIO = 5
ENOMEM = 12
EINVAL = 22
ENOSPC = 28
EOVERFLOW = 75
ENOTSUP = 95
ESHUTDOWN = 108

STATE_HOLE = 1
STATE_ZERO = 2

ERRNAMES = {0: "OK", EPERM: "EPERM", EIO: "EIO", ENOMEM: "ENOMEM", EINVAL: "EINVAL",
            ENOSPC: "ENOSPC", EOVERFLOW: "EOVERFLOW", ENOTSUP: "ENOTSUP",
            ESHUTDOWN: "ESHUTDOWN"}
REPNAMES = {REP_ACK: "ACK", REP_SERVER: "SERVER", REP_INFO: "INFO",
            REP_META_CONTEXT: "META_CONTEXT", REP_ERR_UNSUP: "ERR_UNSUP",
            REP_ERR_POLICY: "ERR_POLICY", REP_ERR_INVALID: "ERR_INVALID",
            REP_ERR_PLATFORM: "ERR_PLATFORM", REP_ERR_TLS_REQD: "ERR_TLS_REQD",
            REP_ERR_UNKNOWN: "ERR_UNKNOWN", REP_ERR_SHUTDOWN: "ERR_SHUTDOWN",
            REP_ERR_BLOCK_SIZE_REQD: "ERR_BLOCK_SIZE_REQD", REP_ERR_TOO_BIG: "ERR_TOO_BIG"}


def repname(t):
    return REPNAMES.get(t, "0x%08x" % t)


def errname(e):
    return ERRNAMES.get(e, str(e))


class Closed(Exception):
    """The server closed the connection (EOF or reset)."""


class ProtocolError(AssertionError):
    """The server sent something the spec does not allow."""


def parse_uri(uri):
    """nbd://HOST[:PORT]/EXPORT or nbd+unix:///EXPORT?socket=PATH ->
    (family, address, export)."""
    u = urllib.parse.urlsplit(uri)
    export = urllib.parse.unquote(u.path[1:] if u.path.startswith("/") else u.path)
    if u.scheme == "nbd":
        return socket.AF_INET, (u.hostname or "127.0.0.1", u.port or 10809), export
    if u.scheme == "nbd+unix":
        q = urllib.parse.parse_qs(u.query)
        return socket.AF_UNIX, q["socket"][0], export
    raise ValueError("unsupported URI %r" % uri)


class Reply:
    """One complete reply: a simple reply, or every chunk up to DONE."""

    def __init__(self, handle):
        self.handle = handle
        self.structured = False
        self.error = 0          # simple reply error, or first error chunk's
        self.message = b""
        self.data = b""          # simple READ payload
        self.chunks = []         # (flags, type, payload) for structured

    def __repr__(self):
        if not self.structured:
            return "<simple reply handle=%#x error=%s %d data bytes>" % (
                self.handle, errname(self.error), len(self.data))
        return "<structured reply handle=%#x error=%s chunks=%s>" % (
            self.handle, errname(self.error), [(f, t, len(p)) for f, t, p in self.chunks])


class Conn:
    def __init__(self, family, address, export="", timeout=10.0):
        self.family = family
        self.address = address
        self.export = export
        self.sock = socket.socket(family, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect(address)
        if family != socket.AF_UNIX:
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.hflags = None
        self.structured = False
        self.pending = {}        # handle -> Reply being assembled (structured)
        self.done = {}           # handle -> finished Reply read while waiting for another
        self.arrivals = []       # handles in the order their replies completed

    @classmethod
    def open(cls, uri, timeout=10.0):
        fam, addr, export = parse_uri(uri)
        return cls(fam, addr, export, timeout)

    # ---- bytes ----------------------------------------------------------
    def settimeout(self, t):
        self.sock.settimeout(t)

    def send(self, b):
        try:
            self.sock.sendall(b)
        except (BrokenPipeError, ConnectionResetError) as e:
            raise Closed("send failed: %s" % e)

    def send_if_open(self, b):
        """Send, unless the server has closed the connection already."""
        try:
            self.send(b)
            return True
        except Closed:
            return False

    def recvn(self, n):
        buf = bytearray()
        while len(buf) < n:
            try:
                chunk = self.sock.recv(min(n - len(buf), 1 << 20))
            except ConnectionResetError:
                raise Closed("connection reset after %d of %d bytes" % (len(buf), n))
            if not chunk:
                raise Closed("EOF after %d of %d bytes" % (len(buf), n))
            buf += chunk
        return bytes(buf)

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def reset(self):
        """Close with SO_LINGER 0: the peer sees a TCP RST."""
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
        self.close()

    def wait_closed(self, timeout=5.0):
        """True if the server closes the connection within timeout (any data
        arriving meanwhile is discarded); False if it stays open."""
        end = time.monotonic() + timeout
        while True:
            left = end - time.monotonic()
            if left <= 0:
                return False
            self.sock.settimeout(left)
            try:
                b = self.sock.recv(65536)
            except socket.timeout:
                return False
            except (ConnectionResetError, BrokenPipeError):
                return True
            if not b:
                return True

    def expect_silence_then_close(self, timeout=5.0):
        """Like wait_closed but also returns what arrived before the close."""
        end = time.monotonic() + timeout
        got = bytearray()
        while True:
            left = end - time.monotonic()
            if left <= 0:
                return False, bytes(got)
            self.sock.settimeout(left)
            try:
                b = self.sock.recv(65536)
            except socket.timeout:
                return False, bytes(got)
            except (ConnectionResetError, BrokenPipeError):
                return True, bytes(got)
            if not b:
                return True, bytes(got)
            got += b

    # ---- handshake ------------------------------------------------------
    def greeting(self):
        g = self.recvn(18)
        magic, ihaveopt, hflags = struct.unpack(">QQH", g)
        if magic != NBDMAGIC:
            raise ProtocolError("greeting magic %#x, want NBDMAGIC" % magic)
        if ihaveopt != IHAVEOPT:
            raise ProtocolError("greeting second magic %#x, want IHAVEOPT (newstyle)" % ihaveopt)
        if hflags & ~(FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES):
            raise ProtocolError("handshake flags %#x set unknown bits" % hflags)
        self.hflags = hflags
        return hflags

    def handshake(self, cflags=None):
        """Greeting, then client flags (default: FIXED_NEWSTYLE, plus
        NO_ZEROES if the server offered it)."""
        hf = self.greeting()
        if cflags is None:
            cflags = FLAG_C_FIXED_NEWSTYLE | (FLAG_C_NO_ZEROES if hf & FLAG_NO_ZEROES else 0)
        self.cflags = cflags
        self.send(struct.pack(">I", cflags))
        return hf

    def option(self, opt, data=b"", length=None, magic=IHAVEOPT):
        if length is None:
            length = len(data)
        self.send(struct.pack(">QII", magic, opt, length) + data)

    def opt_reply(self, expect_opt=None):
        hdr = self.recvn(20)
        magic, opt, rtype, length = struct.unpack(">QIII", hdr)
        if magic != REP_MAGIC:
            raise ProtocolError("option reply magic %#x, want %#x" % (magic, REP_MAGIC))
        if expect_opt is not None and opt != expect_opt:
            raise ProtocolError("option reply echoes option %d, want %d" % (opt, expect_opt))
        if length > 16 << 20:
            raise ProtocolError("option reply length %d is absurd" % length)
        data = self.recvn(length) if length else b""
        return opt, rtype, data

    def replies(self, opt):
        """Every reply to opt up to and including the final one (ACK or an
        error): list of (type, data)."""
        out = []
        while True:
            _, rtype, data = self.opt_reply(opt)
            out.append((rtype, data))
            if rtype == REP_ACK or rtype & 0x80000000:
                return out
            if rtype not in (REP_SERVER, REP_INFO, REP_META_CONTEXT):
                raise ProtocolError("unknown option reply type %#x to option %d" % (rtype, opt))

    def final_reply(self, opt, data=b""):
        """Send opt with data; return the list of replies."""
        self.option(opt, data)
        return self.replies(opt)

    def structured_reply(self):
        r = self.final_reply(OPT_STRUCTURED_REPLY)
        if r[-1][0] != REP_ACK:
            raise ProtocolError("NBD_OPT_STRUCTURED_REPLY refused: %s" % repname(r[-1][0]))
        self.structured = True

    @staticmethod
    def info_data(name, infos=()):
        n = name.encode() if isinstance(name, str) else name
        return struct.pack(">I", len(n)) + n + struct.pack(">H", len(infos)) + \
            b"".join(struct.pack(">H", i) for i in infos)

    @staticmethod
    def meta_data(name, queries):
        n = name.encode() if isinstance(name, str) else name
        d = struct.pack(">I", len(n)) + n + struct.pack(">I", len(queries))
        for q in queries:
            q = q.encode() if isinstance(q, str) else q
            d += struct.pack(">I", len(q)) + q
        return d

    def info(self, opt, name, infos=()):
        """NBD_OPT_INFO or NBD_OPT_GO: returns (final type, dict of infos,
        list of all (type, data))."""
        reps = self.final_reply(opt, self.info_data(name, infos))
        got = {}
        for rtype, data in reps[:-1]:
            if rtype != REP_INFO:
                raise ProtocolError("reply type %s to INFO/GO" % repname(rtype))
            if len(data) < 2:
                raise ProtocolError("NBD_REP_INFO shorter than 2 bytes")
            it = struct.unpack(">H", data[:2])[0]
            if it == INFO_EXPORT:
                if len(data) != 12:
                    raise ProtocolError("NBD_INFO_EXPORT length %d, must be 12" % len(data))
                got[it] = struct.unpack(">QH", data[2:])
            elif it == INFO_BLOCK_SIZE:
                if len(data) != 14:
                    raise ProtocolError("NBD_INFO_BLOCK_SIZE length %d, must be 14" % len(data))
                got[it] = struct.unpack(">III", data[2:])
            elif it in (INFO_NAME, INFO_DESCRIPTION):
                got[it] = data[2:].decode()
            else:
                got[it] = data[2:]
            got.setdefault("order", []).append(it)
        return reps[-1][0], got, reps

    def go(self, name=None, infos=(INFO_BLOCK_SIZE,), structured=True, meta=()):
        """Structured replies (optional), SET_META_CONTEXT (optional), GO.
        Returns (size, transmission flags)."""
        if name is None:
            name = self.export
        if structured and not self.structured:
            self.structured_reply()
        if meta:
            reps = self.final_reply(OPT_SET_META_CONTEXT, self.meta_data(name, meta))
            if reps[-1][0] != REP_ACK:
                raise ProtocolError("SET_META_CONTEXT refused: %s" % repname(reps[-1][0]))
            self.contexts = {}
            for t, d in reps[:-1]:
                cid = struct.unpack(">I", d[:4])[0]
                self.contexts[d[4:].decode()] = cid
        final, got, _ = self.info(OPT_GO, name, infos)
        if final != REP_ACK:
            raise ProtocolError("NBD_OPT_GO refused: %s" % repname(final))
        if INFO_EXPORT not in got:
            raise ProtocolError("NBD_OPT_GO acked without NBD_INFO_EXPORT")
        self.size, self.tflags = got[INFO_EXPORT]
        self.block_size = got.get(INFO_BLOCK_SIZE)
        return self.size, self.tflags

    def export_name(self, name=None):
        """Enter transmission with NBD_OPT_EXPORT_NAME (no option reply; no
        block size information either).  Returns (size, transmission flags)."""
        if name is None:
            name = self.export
        self.option(OPT_EXPORT_NAME, name.encode() if isinstance(name, str) else name)
        self.size, self.tflags = struct.unpack(">QH", self.recvn(10))
        if not self.cflags & FLAG_C_NO_ZEROES:
            self.recvn(124)
        self.block_size = None
        return self.size, self.tflags

    # ---- transmission ---------------------------------------------------
    @staticmethod
    def pack_request(cmd, flags=0, handle=0, offset=0, length=0, payload=b"", magic=REQUEST_MAGIC):
        return struct.pack(">IHHQQI", magic, flags, cmd, handle, offset, length) + payload

    def request(self, cmd, flags=0, handle=0, offset=0, length=None, payload=b"", magic=REQUEST_MAGIC):
        if length is None:
            length = len(payload)
        self.send(self.pack_request(cmd, flags, handle, offset, length, payload, magic))

    def read_one(self, read_lengths=None):
        """Read one simple reply or one structured chunk.  For a simple
        reply to a READ the payload length must be known: read_lengths maps
        handle -> length of READ requests (data follows only if error == 0)."""
        m = self.recvn(4)
        magic = struct.unpack(">I", m)[0]
        if magic == SIMPLE_REPLY_MAGIC:
            error, handle = struct.unpack(">IQ", self.recvn(12))
            r = Reply(handle)
            r.error = error
            if error == 0 and read_lengths and handle in read_lengths:
                r.data = self.recvn(read_lengths[handle])
            return "simple", r
        if magic == STRUCTURED_REPLY_MAGIC:
            if not self.structured:
                raise ProtocolError("structured reply chunk without NBD_OPT_STRUCTURED_REPLY")
            flags, rtype, handle, length = struct.unpack(">HHQI", self.recvn(16))
            if length > (64 << 20) + 64:
                # a READ chunk carries at most 64 MiB (flashd's limit for
                # clients without block size constraints) and its offset
                raise ProtocolError("chunk length %d is absurd" % length)
            payload = self.recvn(length) if length else b""
            return "chunk", (flags, rtype, handle, payload)
        raise ProtocolError("reply magic %#x is neither simple nor structured" % magic)

    def reply_for(self, handle, read_lengths=None):
        """Read replies until the one for handle is complete; replies to
        other handles are kept (self.done) for later calls."""
        if handle in self.done:
            return self.done.pop(handle)
        while True:
            kind, x = self.read_one(read_lengths)
            if kind == "simple":
                r = x
                if r.handle in self.pending:
                    raise ProtocolError("simple reply for handle %#x whose structured reply is not done" % r.handle)
            else:
                flags, rtype, h, payload = x
                r = self.pending.setdefault(h, Reply(h))
                r.structured = True
                r.chunks.append((flags, rtype, payload))
                if rtype & 0x8000 and not r.error:
                    if len(payload) < 6:
                        raise ProtocolError("error chunk shorter than 6 bytes")
                    err, mlen = struct.unpack(">IH", payload[:6])
                    if err == 0:
                        raise ProtocolError("error chunk with error 0")
                    r.error = err
                    r.message = payload[6:6 + mlen]
                if flags & ~REPLY_FLAG_DONE:
                    raise ProtocolError("chunk flags %#x set unknown bits" % flags)
                if not flags & REPLY_FLAG_DONE:
                    continue
                del self.pending[h]
            self.arrivals.append(r.handle)
            if r.handle == handle:
                return r
            if r.handle in self.done:
                raise ProtocolError("second reply for handle %#x" % r.handle)
            self.done[r.handle] = r

    def cmd(self, cmd, flags=0, offset=0, length=None, payload=b"", handle=None):
        """Send one request and wait for its reply."""
        if handle is None:
            handle = int.from_bytes(os.urandom(8), "big")
        if length is None:
            length = len(payload)
        self.request(cmd, flags, handle, offset, length, payload)
        return self.reply_for(handle, {handle: length} if cmd == CMD_READ else None)


def read_data(reply, offset, length):
    """Reassemble a READ reply into bytes, checking the chunk rules of the
    spec (structured) or the payload length (simple)."""
    if not reply.structured:
        if reply.error:
            raise ProtocolError("READ failed: %s" % errname(reply.error))
        if len(reply.data) != length:
            raise ProtocolError("simple READ reply with %d bytes, want %d" % (len(reply.data), length))
        return reply.data
    check_chunks(reply, "read", offset, length)
    if reply.error:
        raise ProtocolError("READ failed: %s" % errname(reply.error))
    buf = bytearray(length)
    covered = 0
    for flags, rtype, p in reply.chunks:
        if rtype == RT_OFFSET_DATA:
            off = struct.unpack(">Q", p[:8])[0]
            buf[off - offset:off - offset + len(p) - 8] = p[8:]
            covered += len(p) - 8
        elif rtype == RT_OFFSET_HOLE:
            off, n = struct.unpack(">QI", p)
            covered += n
    if covered != length:
        raise ProtocolError("READ chunks cover %d bytes of %d" % (covered, length))
    return bytes(buf)


def check_chunks(reply, kind, offset=0, length=0):
    """Structural rules of a structured reply (doc/proto.md, structured
    reply chunk message): DONE exactly on the last chunk, NONE empty, content
    chunks inside the request and not overlapping, error chunks well formed."""
    ch = reply.chunks
    if not ch:
        raise ProtocolError("structured reply without chunks")
    for i, (flags, rtype, p) in enumerate(ch):
        last = i == len(ch) - 1
        if bool(flags & REPLY_FLAG_DONE) != last:
            raise ProtocolError("DONE flag on chunk %d of %d" % (i + 1, len(ch)))
    ranges = []
    for flags, rtype, p in ch:
        if rtype == RT_NONE:
            if p:
                raise ProtocolError("NONE chunk with %d payload bytes" % len(p))
            if not flags & REPLY_FLAG_DONE:
                raise ProtocolError("NONE chunk without DONE")
        elif rtype in (RT_OFFSET_DATA, RT_OFFSET_HOLE):
            if kind != "read":
                raise ProtocolError("content chunk in the reply to a %s" % kind)
            if rtype == RT_OFFSET_DATA:
                if len(p) < 9:
                    raise ProtocolError("OFFSET_DATA chunk of %d bytes (must describe >= 1 byte)" % len(p))
                off, n = struct.unpack(">Q", p[:8])[0], len(p) - 8
            else:
                if len(p) != 12:
                    raise ProtocolError("OFFSET_HOLE chunk of %d bytes, must be 12" % len(p))
                off, n = struct.unpack(">QI", p)
                if n == 0:
                    raise ProtocolError("OFFSET_HOLE of size 0")
            if off < offset or off + n > offset + length:
                raise ProtocolError("content chunk [%d,+%d) outside the request [%d,+%d)" % (off, n, offset, length))
            for a, b in ranges:
                if off < b and a < off + n:
                    raise ProtocolError("content chunks overlap")
            ranges.append((off, off + n))
        elif rtype == RT_BLOCK_STATUS:
            if kind != "block_status":
                raise ProtocolError("BLOCK_STATUS chunk in the reply to a %s" % kind)
            if len(p) < 12 or (len(p) - 4) % 8:
                raise ProtocolError("BLOCK_STATUS chunk of %d bytes" % len(p))
        elif rtype == RT_ERROR:
            if len(p) < 6:
                raise ProtocolError("ERROR chunk of %d bytes" % len(p))
            err, ml = struct.unpack(">IH", p[:6])
            if ml > len(p) - 6 or ml > 4096:
                raise ProtocolError("ERROR chunk message length %d in a %d-byte chunk" % (ml, len(p)))
        elif rtype == RT_ERROR_OFFSET:
            if len(p) < 14:
                raise ProtocolError("ERROR_OFFSET chunk of %d bytes" % len(p))
            err, ml = struct.unpack(">IH", p[:6])
            if ml > len(p) - 14:
                raise ProtocolError("ERROR_OFFSET message length %d in a %d-byte chunk" % (ml, len(p)))
            eoff = struct.unpack(">Q", p[6 + ml:14 + ml])[0]
            if not offset <= eoff < offset + max(length, 1):
                raise ProtocolError("ERROR_OFFSET offset %d outside the request" % eoff)
        else:
            raise ProtocolError("unknown chunk type %#x" % rtype)


def block_status_extents(reply, offset, length, req_one=False, min_block=1):
    """Decode a BLOCK_STATUS reply: {context id: [(length, flags)]}, checking
    the descriptor rules."""
    check_chunks(reply, "block_status", offset, length)
    if reply.error:
        raise ProtocolError("BLOCK_STATUS failed: %s" % errname(reply.error))
    out = {}
    for flags, rtype, p in reply.chunks:
        if rtype != RT_BLOCK_STATUS:
            continue
        cid = struct.unpack(">I", p[:4])[0]
        if cid in out:
            raise ProtocolError("two BLOCK_STATUS chunks for context %d" % cid)
        ext = [struct.unpack(">II", p[4 + 8 * i:12 + 8 * i]) for i in range((len(p) - 4) // 8)]
        if not ext:
            raise ProtocolError("BLOCK_STATUS chunk without descriptors")
        tot = 0
        for i, (n, st) in enumerate(ext):
            if n == 0:
                raise ProtocolError("extent of length 0")
            if n % min_block:
                raise ProtocolError("extent length %d not a multiple of the minimum block size %d" % (n, min_block))
            if i < len(ext) - 1 and tot + n >= length:
                raise ProtocolError("extents continue after covering the request")
            tot += n
        if req_one:
            if len(ext) != 1:
                raise ProtocolError("REQ_ONE reply with %d extents" % len(ext))
            if ext[0][0] > length:
                raise ProtocolError("REQ_ONE extent of %d bytes exceeds the request (%d)" % (ext[0][0], length))
        out[cid] = ext
    return out
