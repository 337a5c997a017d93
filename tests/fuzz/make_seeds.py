#!/usr/bin/python3
"""tests/fuzz/make_seeds.py - write the seed corpora of tests/fuzz/corpus/.

   tests/fuzz/make_seeds.py [DIR]   (default: tests/fuzz/corpus)

nbd: client byte streams of typical sessions (fixed newstyle; GO, INFO,
LIST, EXPORT_NAME, STARTTLS, structured replies, meta contexts, extended
headers; every command).  image: a few patch records per mode.  acl and
config: typical rules and files.  The committed corpora were made with it;
run it again only to change the seeds."""
import os
import struct
import sys

top = os.path.dirname(os.path.abspath(__file__))
out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(top, "corpus")

OPT = b"IHAVEOPT"
REQ_MAGIC = 0x25609513
EXT_MAGIC = 0x21E41C71


def opt(num, data=b""):
    return OPT + struct.pack(">II", num, len(data)) + data


def go(name, infos=(3,), num=7):
    n = name.encode()
    return opt(num, struct.pack(">I", len(n)) + n + struct.pack(">H", len(infos)) +
               b"".join(struct.pack(">H", i) for i in infos))


def meta(num, name, queries):
    n = name.encode()
    d = struct.pack(">I", len(n)) + n + struct.pack(">I", len(queries))
    for q in queries:
        d += struct.pack(">I", len(q)) + q.encode()
    return opt(num, d)


def req(typ, off, length, flags=0, cookie=1, payload=b""):
    return struct.pack(">IHHQQI", REQ_MAGIC, flags, typ, cookie, off, length) + payload


def ereq(typ, off, length, flags=0, cookie=1, payload=b""):
    return struct.pack(">IHHQQQ", EXT_MAGIC, flags, typ, cookie, off, length) + payload


def cmds(r=req):
    s = b""
    s += r(1, 0, 4096, payload=bytes([0xA5]) * 4096, cookie=1)       # WRITE
    s += r(0, 0, 4096, cookie=2)                                      # READ
    s += r(1, 8192, 512, flags=1, payload=bytes([7]) * 512, cookie=3)  # WRITE FUA
    s += r(4, 4096, 8192, cookie=4)                                   # TRIM
    s += r(6, 16384, 65536, flags=2, cookie=5)                        # WRITE_ZEROES NO_HOLE
    s += r(6, 16384, 65536, flags=16, cookie=6)                       # WRITE_ZEROES FAST_ZERO
    s += r(5, 0, 1 << 20, cookie=7)                                   # CACHE
    s += r(7, 0, 1 << 20, flags=8, cookie=8)                          # BLOCK_STATUS REQ_ONE
    s += r(0, 0, 8192, flags=4, cookie=9)                             # READ DF
    s += r(3, 0, 0, cookie=10)                                        # FLUSH
    s += r(2, 0, 0, cookie=11)                                        # DISC
    return s


CLIENT_FLAGS = struct.pack(">I", 3)  # FIXED_NEWSTYLE | NO_ZEROES
seeds = {
    "go_dimm0": CLIENT_FLAGS + go("dimm0") + cmds(),
    "go_dimm1_noinfo": CLIENT_FLAGS + go("dimm1", ()) + cmds(),
    "list_info_abort": CLIENT_FLAGS + opt(3) + go("dimm0", (0, 1, 2, 3), num=6) + go("nope", (1,), num=6) + opt(2),
    "structured_meta": CLIENT_FLAGS + opt(8) + meta(9, "dimm0", []) + meta(9, "dimm0", ["base:"]) +
    meta(10, "dimm0", ["base:allocation", "qemu:dirty-bitmap:x"]) + go("dimm0") + cmds(),
    "export_name": CLIENT_FLAGS + opt(1, b"dimm1") + cmds(),
    "export_name_zeroes": struct.pack(">I", 1) + opt(1, b"dimm0") + req(0, 0, 512) + req(2, 0, 0),
    "oldflags_empty_name": struct.pack(">I", 0) + opt(1, b""),
    "starttls": CLIENT_FLAGS + opt(5) + b"\x16\x03\x01\x00\x05hello",
    "starttls_twice": CLIENT_FLAGS + opt(8) + opt(5, b"x") + opt(5),
    "extended": CLIENT_FLAGS + opt(11) + opt(8) + meta(10, "dimm0", ["base:allocation"]) + go("dimm0") + cmds(ereq),
    "unknown_opts": CLIENT_FLAGS + opt(0x1234, b"abc") + opt(3, b"junk") + opt(7, b"\x00\x00\x00\x09dimm0") + opt(2, b"x"),
    "bad_requests": CLIENT_FLAGS + go("dimm0") + req(0, 1 << 40, 4096) + req(1, 3, 5, payload=b"12345") +
    req(9, 0, 0) + req(0, 0, 64 << 20) + req(1, 0, 0) + req(4, 0, 0xFFFFFFFF) + req(7, 0, 4096, flags=0x80) + req(2, 0, 0),
}

os.makedirs(os.path.join(out, "nbd"), exist_ok=True)
for name, data in seeds.items():
    with open(os.path.join(out, "nbd", name), "wb") as f:
        f.write(data)


# image: mode byte, then records (u16 page, u8 flags, u16 off, u8 len, bytes)
def rec(page, flags, off, data):
    return struct.pack("<HBHB", page, flags, off, len(data)) + data


# a field (tests/fuzz/image_craft.h, craft_fields[idx]) of the sel-th page it
# applies to set to craft_value number k (elem: list word, entry, range)
def field(sel, idx, k, elem=0):
    return rec(sel, 3, idx, bytes([k, elem & 0xFF, elem >> 8]))


# byte 0 bit 7: the parity image
images = {
    "ro_open_clean": b"\x00",
    "scan": b"\x01",
    "probe": b"\x02",
    "rw_open": b"\x03",
    "sb_seq": b"\x00" + rec(0, 0, 24, struct.pack("<Q", 1 << 40)),
    "sb_cp_block": b"\x00" + rec(1, 0, 136, struct.pack("<II", 7, 1000)),
    "cp_units": b"\x00" + rec(4, 0, 40, struct.pack("<Q", 1 << 33)),
    "cp_lists": b"\x03" + rec(5, 0, 56, struct.pack("<IIII", 400, 3, 5, 0)),
    "spare_type": b"\x00" + rec(30, 1, 4, b"\x05"),
    "spare_lba": b"\x00" + rec(200, 1, 8, struct.pack("<I", 0xFFFFFFF0)),
    "table_wp": b"\x00" + rec(3, 2, 0, struct.pack("<I", 0xFFFF)),
    "nocrc_flip": b"\x01" + rec(2, 4, 10, b"\xff\xff"),
    "parity_ro": b"\x80",
    "parity_rw": b"\x83",
    "field_sb_units": b"\x00" + field(0, 6, 7) + field(1, 6, 7),
    "field_sb_cp_block": b"\x80" + field(0, 7, 15) + field(1, 7, 15),
    "field_cp_nblocks": b"\x80" + field(0, 21, 2),
    "field_cp_list": b"\x83" + field(0, 28, 9, 3),
    "field_footer_seq": b"\x83" + field(5, 32, 2, 0),
    "field_footer_lba": b"\x80" + field(9, 33, 12, 1),
    "field_trim_range": b"\x03" + field(0, 36, 11, 0),
    "field_spare_seq": b"\x83" + field(700, 40, 2),
    "field_spare_mask": b"\x80" + field(900, 41, 21),
    "field_table_wp": b"\x03" + field(3, 42, 17),
}
os.makedirs(os.path.join(out, "image"), exist_ok=True)
for name, data in images.items():
    with open(os.path.join(out, "image", name), "wb") as f:
        f.write(data)

acls = {
    "nets": b"\x00127.0.0.1 10.0.0.0/8 ::1 fd00::/8 ::ffff:192.168.0.0/112",
    "tls": b"\x00tls:alice tls:psk=bob tls:CN=client.example tls:SAN=host.example tls:*",
    "ro_all": b"\x02* unix",
    "bad": b"\x0010.0.0.1/33 1.2.3 tls: ::ffff:1.2.3.4/95",
    "num": b"\x0118446744073709551615",
    "bytes": b"\x0164GiB",
    "pct": b"\x0112.5%",
    "dbl": b"\x01-0.000000000000000001",
}
os.makedirs(os.path.join(out, "acl"), exist_ok=True)
for name, data in acls.items():
    with open(os.path.join(out, "acl", name), "wb") as f:
        f.write(data)

configs = {
    "duo": b"""[server]
listen = 127.0.0.1:10809
listen = [::1]:10810 tls=required
max_connections = 64
handshake_timeout = 5
tls = allowed

[card duo0]
timing = off

[dimm dimm0]
card = duo0
preset = test-16m
image = dimm0.img
allow = 127.0.0.1 10.0.0.0/8 unix
allow_ro = ::1 tls:*
list_denied = no

[dimm dimm1]
card = duo0
preset = test-64m
capacity = 32M
op = 25%
sector_size = 512
readonly = yes
export = other
description = the second one
""",
    "bad": b"[dimm a]\npreset = nope\ncapacity = -1\n[server\nkey\n",
    "tls": b"[server]\ntls = required\ntls_psk = /nonexistent\ntls_verify_peer = yes\nunix_mode = 0600\numask = 022\n"
           b"[dimm x]\npreset = test-16m\nallow = tls:psk=alice\ntls = required\n",
}
os.makedirs(os.path.join(out, "config"), exist_ok=True)
for name, data in configs.items():
    with open(os.path.join(out, "config", name), "wb") as f:
        f.write(data)
