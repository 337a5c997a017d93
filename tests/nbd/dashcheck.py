#!/usr/bin/python3
"""Checks of the dashboard's DOM dumps and screenshots (tests/test-dashboard.sh,
tests/test-manage-health.sh).

  dashcheck.py fig DOM ID            data-value of element ID
  dashcheck.py state DOM ID          data-state of element ID
  dashcheck.py reasons DOM NAME      the data-reason of each reason shown for ioDimm NAME
  dashcheck.py axes DOM              every chart's y axis: labels in one unit, round
                                     steps (1, 2 or 5 x 10^k), each label the value
                                     of its tick; prints a line per chart
  dashcheck.py attr DOM ID ATTR      attribute ATTR of element ID
  dashcheck.py colours PNG RRGGBB... pixels of each colour in a screenshot (8-bit RGB
                                     or RGBA PNG, any filter), one count per line
"""
import math
import re
import struct
import sys
import zlib


def tag(dom, ident):
    m = re.search(r'<[a-z0-9]+ [^>]*id="%s"[^>]*>' % re.escape(ident), dom)
    if not m:
        sys.exit("no element with id %s in the page" % ident)
    return m.group(0)


def attr(t, name):
    m = re.search(r' %s="([^"]*)"' % re.escape(name), t)
    return m.group(1) if m else None


# unit suffixes of dashboard.js (UNITS) -> factor to the base unit
SUFFIX = {
    "ns": {"ns": 1, "\u00b5s": 1e3, "ms": 1e6, "s": 1e9},
    "Bps": {"B/s": 1, "kB/s": 1e3, "MB/s": 1e6, "GB/s": 1e9},
    "rate": {"/s": 1, "k/s": 1e3, "M/s": 1e6},
    "pct": {"%": 1},
    "degC": {"\u00b0C": 1},
}


def check_axes(dom):
    bad = []
    n = 0
    for t in re.findall(r'<canvas [^>]*id="c-[^"]*"[^>]*>', dom):
        ident = attr(t, "id")
        ticks = attr(t, "data-ticks")
        if not ticks:
            continue  # "no figures" charts have no axis
        n += 1
        kind = attr(t, "data-unit")
        step = float(attr(t, "data-step"))
        amax = float(attr(t, "data-max"))
        peak = float(attr(t, "data-peak"))
        labels = ticks.split("|")
        units = set()
        mant = step / 10 ** math.floor(math.log10(step) + 1e-9)
        if not any(abs(mant - m) < 1e-6 for m in (1, 2, 5)):
            bad.append("%s: step %g is not 1, 2 or 5 times a power of ten" % (ident, step))
        if labels[0] != "0":
            bad.append("%s: the first label is %r, not 0" % (ident, labels[0]))
        for i, lab in enumerate(labels[1:], 1):
            m = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?) ?(\S+)", lab)
            if not m or m.group(2) not in SUFFIX.get(kind, {}):
                bad.append("%s: label %r is not a number in a unit of %s" % (ident, lab, kind))
                continue
            units.add(m.group(2))
            value = float(m.group(1)) * SUFFIX[kind][m.group(2)]
            if abs(value - i * step) > 1e-6 * max(1, i * step):
                bad.append("%s: label %r of tick %d reads %g, the tick is %g" % (ident, lab, i, value, i * step))
        if len(units) > 1:
            bad.append("%s: labels in several units: %s" % (ident, ", ".join(sorted(units))))
        if abs((len(labels) - 1) * step - amax) > 1e-6 * amax or amax < peak:
            bad.append("%s: the axis ends at %g, the last label's tick is %g, the data reach %g" % (
                ident, amax, (len(labels) - 1) * step, peak))
        print("%s: %s" % (ident, " ".join(labels)))
    if not n:
        bad.append("no chart with an axis in the page")
    if bad:
        sys.exit("\n".join(bad))


def png_pixels(path):
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        sys.exit("%s is not a PNG" % path)
    pos, idat, w = 8, b"", 0
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            w, h, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", body)
            if depth != 8 or ctype not in (2, 6) or interlace:
                sys.exit("%s: only 8-bit RGB(A) without interlace (depth %d, type %d)" % (path, depth, ctype))
            bpp = 3 if ctype == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    raw = zlib.decompress(idat)
    stride = w * bpp
    prev = bytearray(stride)
    out = []
    for y in range(h):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        out.append(bytes(line))
        prev = line
    return out, bpp


def colours(path, wanted):
    rows, bpp = png_pixels(path)
    want = {bytes.fromhex(c): 0 for c in wanted}
    for line in rows:
        for i in range(0, len(line), bpp):
            px = line[i:i + 3]
            if px in want:
                want[px] += 1
    for c in wanted:
        print(want[bytes.fromhex(c)])


def main():
    cmd = sys.argv[1]
    if cmd == "colours":
        colours(sys.argv[2], sys.argv[3:])
        return
    dom = open(sys.argv[2], encoding="utf-8").read()
    if cmd == "fig":
        print(attr(tag(dom, sys.argv[3]), "data-value"))
    elif cmd == "state":
        print(attr(tag(dom, sys.argv[3]), "data-state"))
    elif cmd == "attr":
        print(attr(tag(dom, sys.argv[3]), sys.argv[4]))
    elif cmd == "reasons":
        m = re.search(r'<div [^>]*id="h-%s".*?</div>\s*(?:<ul>.*?</ul>)?' % re.escape(sys.argv[3]), dom, re.S)
        card = m.group(0) if m else ""
        print(" ".join(re.findall(r'data-reason="([^"]*)"', card)))
    elif cmd == "axes":
        check_axes(dom)
    else:
        sys.exit(__doc__)


main()
