#!/usr/bin/python3
"""promcheck.py - a strict checker of the Prometheus text exposition format
(version 0.0.4, as Prometheus' expfmt parses it), for flashd's /metrics.

    promcheck.py FILE|-          exit 0 and a summary, or 1 and every error
    promcheck.py --self-test     show that it refuses broken expositions
    families = promcheck.parse(text)    # raises PromError listing them all

Checks, beyond the grammar (metric and label names, label value escapes,
Go float values, optional integer timestamps, a final newline):
  - every family has one HELP and one TYPE line, before its samples;
  - a family's samples are contiguous (never interleaved with another's);
  - no series (name + label set) appears twice; a label appears once per
    sample and no label name starts with "__";
  - the series of a family have the same label names;
  - counters are finite, >= 0 and named *_total;
  - histograms: only NAME_bucket (with le), NAME_sum and NAME_count;
    per label set the le values increase and end with +Inf, the bucket
    counts never decrease, NAME_count equals the +Inf bucket, NAME_sum
    is there.
parse() returns {family: {"type", "help", "samples": [(name, labels, value)]}}.
"""
import math
import re
import sys

NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
FLOAT = re.compile(r"[+-]?(?:Inf|inf|NaN|nan|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)$")
TYPES = ("counter", "gauge", "histogram", "summary", "untyped")


class PromError(Exception):
    pass


def parse_value(s):
    if not FLOAT.match(s):
        raise ValueError("'%s' is not a float" % s)
    return float(s)


def parse_labels(s, pos, errs, where):
    """s[pos] == '{'; returns (dict, position after '}')."""
    labels = {}
    pos += 1
    while True:
        if pos >= len(s):
            errs.append("%s: unterminated label set" % where)
            return labels, pos
        if s[pos] == "}":
            return labels, pos + 1
        m = LABEL.match(s, pos)
        if not m:
            errs.append("%s: bad label name at column %d" % (where, pos + 1))
            return labels, len(s)
        name = m.group(0)
        pos = m.end()
        if name.startswith("__"):
            errs.append("%s: label name %s is reserved" % (where, name))
        if s[pos:pos + 2] != '="':
            errs.append("%s: label %s: expected =\"" % (where, name))
            return labels, len(s)
        pos += 2
        val = []
        while True:
            if pos >= len(s):
                errs.append("%s: label %s: unterminated value" % (where, name))
                return labels, pos
            c = s[pos]
            if c == "\\":
                n = s[pos + 1:pos + 2]
                if n not in ("\\", '"', "n"):
                    errs.append("%s: label %s: bad escape \\%s" % (where, name, n))
                val.append("\n" if n == "n" else n)
                pos += 2
                continue
            if c == '"':
                pos += 1
                break
            if c == "\n":
                errs.append("%s: label %s: raw newline" % (where, name))
            val.append(c)
            pos += 1
        if name in labels:
            errs.append("%s: label %s given twice" % (where, name))
        labels[name] = "".join(val)
        if pos < len(s) and s[pos] == ",":
            pos += 1
        elif pos < len(s) and s[pos] != "}":
            errs.append("%s: expected , or } after label %s" % (where, name))
            return labels, len(s)


def family_of(name, types):
    """The family a sample name belongs to (histogram/summary suffixes)."""
    for suf in ("_bucket", "_sum", "_count"):
        if name.endswith(suf):
            base = name[: -len(suf)]
            if types.get(base) in ("histogram", "summary") and (suf != "_bucket" or types[base] == "histogram"):
                return base
    return name


def parse(text):
    errs = []
    fams = {}
    types = {}
    order = []          # families in the order their samples appear
    seen_series = set()
    if text and not text.endswith("\n"):
        errs.append("the text does not end with a newline")
    for n, line in enumerate(text.split("\n")[:-1] if text.endswith("\n") else text.split("\n"), 1):
        where = "line %d" % n
        if not line.strip():
            continue
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) >= 2 and parts[1] in ("HELP", "TYPE"):
                if len(parts) < 3 or not NAME.fullmatch(parts[2]):
                    errs.append("%s: %s without a valid metric name" % (where, parts[1]))
                    continue
                name = parts[2]
                f = fams.setdefault(name, {"type": None, "help": None, "samples": [], "line": n})
                if parts[1] == "HELP":
                    if f["help"] is not None:
                        errs.append("%s: second HELP for %s" % (where, name))
                    doc = parts[3] if len(parts) > 3 else ""
                    for m in re.finditer(r"\\(.)", doc):
                        if m.group(1) not in ("\\", "n"):
                            errs.append("%s: HELP of %s: bad escape \\%s" % (where, name, m.group(1)))
                    f["help"] = doc
                else:
                    t = parts[3].strip() if len(parts) > 3 else ""
                    if t not in TYPES:
                        errs.append("%s: TYPE of %s: unknown type '%s'" % (where, name, t))
                    if f["type"] is not None:
                        errs.append("%s: second TYPE for %s" % (where, name))
                    if f["samples"]:
                        errs.append("%s: TYPE for %s after its samples" % (where, name))
                    f["type"] = t
                    types[name] = t
            continue
        m = NAME.match(line)
        if not m:
            errs.append("%s: no metric name: %r" % (where, line[:60]))
            continue
        name = m.group(0)
        pos = m.end()
        labels = {}
        if pos < len(line) and line[pos] == "{":
            labels, pos = parse_labels(line, pos, errs, where)
        rest = line[pos:]
        if not rest.startswith(" ") and not rest.startswith("\t"):
            errs.append("%s: no blank between %s and its value" % (where, name))
            continue
        fields = rest.split()
        if len(fields) not in (1, 2):
            errs.append("%s: expected a value and an optional timestamp, got %r" % (where, rest))
            continue
        try:
            value = parse_value(fields[0])
        except ValueError as e:
            errs.append("%s: %s" % (where, e))
            continue
        if len(fields) == 2 and not re.fullmatch(r"-?[0-9]+", fields[1]):
            errs.append("%s: timestamp '%s' is not an integer" % (where, fields[1]))
        fam = family_of(name, types)
        f = fams.get(fam)
        if f is None or f["type"] is None:
            errs.append("%s: sample %s before (or without) a TYPE line for %s" % (where, name, fam))
            f = fams.setdefault(fam, {"type": "untyped", "help": None, "samples": [], "line": n})
        if order and order[-1] != fam and fam in order:
            errs.append("%s: samples of %s are not contiguous (interleaved with %s)" % (where, fam, order[-1]))
        if not order or order[-1] != fam:
            order.append(fam)
        key = (name, tuple(sorted(labels.items())))
        if key in seen_series:
            errs.append("%s: series %s%s appears twice" % (where, name, dict(labels)))
        seen_series.add(key)
        t = f["type"]
        if t == "counter":
            if not name.endswith("_total"):
                errs.append("%s: counter %s is not named *_total" % (where, name))
            if math.isnan(value) or value < 0 or math.isinf(value):
                errs.append("%s: counter %s = %s" % (where, name, fields[0]))
        if t == "histogram":
            if name == fam:
                errs.append("%s: histogram %s: bare sample (want _bucket, _sum, _count)" % (where, name))
            if name.endswith("_bucket") != ("le" in labels):
                errs.append("%s: %s: le label belongs on _bucket samples only" % (where, name))
        elif "le" in labels and t != "untyped":
            errs.append("%s: %s: le label outside a histogram" % (where, name))
        f["samples"].append((name, labels, value))
    for fam, f in fams.items():
        if f["help"] is None:
            errs.append("family %s has no HELP line" % fam)
        if f["type"] is None:
            errs.append("family %s has no TYPE line" % fam)
        names = None
        for name, labels, _ in f["samples"]:
            ln = set(labels) - ({"le"} if name.endswith("_bucket") else set())
            if names is None:
                names = ln
            elif ln != names:
                errs.append("family %s: label names differ between series: %s vs %s" % (fam, sorted(names), sorted(ln)))
                break
        if f["type"] == "histogram":
            groups = {}
            for name, labels, value in f["samples"]:
                base = tuple(sorted((k, v) for k, v in labels.items() if k != "le"))
                g = groups.setdefault(base, {"buckets": [], "sum": None, "count": None})
                if name == fam + "_bucket":
                    try:
                        le = parse_value(labels["le"])
                    except ValueError as e:
                        errs.append("family %s %s: le: %s" % (fam, dict(base), e))
                        continue
                    g["buckets"].append((le, value))
                elif name == fam + "_sum":
                    g["sum"] = value
                elif name == fam + "_count":
                    g["count"] = value
            for base, g in groups.items():
                b = g["buckets"]
                what = "histogram %s %s" % (fam, dict(base))
                if not b or not math.isinf(b[-1][0]):
                    errs.append("%s: no +Inf bucket last" % what)
                    continue
                for (l1, c1), (l2, c2) in zip(b, b[1:]):
                    if not l2 > l1:
                        errs.append("%s: le %g after %g" % (what, l2, l1))
                    if c2 < c1:
                        errs.append("%s: bucket le=%g holds %g, fewer than le=%g (%g)" % (what, l2, c2, l1, c1))
                if g["count"] is None or g["sum"] is None:
                    errs.append("%s: _count or _sum missing" % what)
                elif g["count"] != b[-1][1]:
                    errs.append("%s: _count %g != +Inf bucket %g" % (what, g["count"], b[-1][1]))
    if errs:
        raise PromError("\n".join(errs))
    return fams


BROKEN = {
    "interleaved families": '# HELP a_total x\n# TYPE a_total counter\na_total{d="1"} 3\n'
                            '# HELP b y\n# TYPE b gauge\nb 1\na_total{d="2"} 3\n',
    "bad escape": '# HELP b y\n# TYPE b gauge\nb{x="a\\q"} 1\n',
    "counter without _total": '# HELP b y\n# TYPE b counter\nb 1\n',
    "decreasing buckets": '# HELP h y\n# TYPE h histogram\nh_bucket{le="0.1"} 3\n'
                          'h_bucket{le="+Inf"} 2\nh_sum 0.3\nh_count 2\n',
    "no +Inf bucket": '# HELP h y\n# TYPE h histogram\nh_bucket{le="0.1"} 1\nh_sum 0.3\nh_count 1\n',
    "_count != +Inf": '# HELP h y\n# TYPE h histogram\nh_bucket{le="+Inf"} 2\nh_sum 0.3\nh_count 3\n',
    "duplicate series": '# HELP b y\n# TYPE b gauge\nb{x="1"} 1\nb{x="1"} 2\n',
    "bad float": '# HELP b y\n# TYPE b gauge\nb 1.2.3\n',
    "sample without TYPE": 'b 1\n',
    "no final newline": '# HELP b y\n# TYPE b gauge\nb 1',
    "TYPE after samples": '# HELP b y\nb 1\n# TYPE b gauge\n',
    "label names differ": '# HELP b y\n# TYPE b gauge\nb{x="1"} 1\nb{y="1"} 2\n',
    "unterminated labels": '# HELP b y\n# TYPE b gauge\nb{x="1" 1\n',
}
GOOD = ('# HELP a_total x\n# TYPE a_total counter\na_total{d="1"} 3\n# HELP h y\n'
        '# TYPE h histogram\nh_bucket{le="0.1"} 1\nh_bucket{le="+Inf"} 2\nh_sum 0.3\nh_count 2\n')


def self_test():
    parse(GOOD)
    missed = []
    for what, text in BROKEN.items():
        try:
            parse(text)
            missed.append(what)
        except PromError as e:
            print("refused (%s): %s" % (what, str(e).splitlines()[0]))
    if missed:
        print("FAIL: accepted broken expositions: %s" % ", ".join(missed))
        return 1
    print("ok: the checker refuses all %d broken expositions" % len(BROKEN))
    return 0


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    path = sys.argv[1] if len(sys.argv) > 1 else "-"
    text = sys.stdin.read() if path == "-" else open(path).read()
    try:
        fams = parse(text)
    except PromError as e:
        print("FAIL: the exposition is not valid:\n" + str(e))
        return 1
    n = sum(len(f["samples"]) for f in fams.values())
    print("ok: %d families, %d samples, valid text exposition 0.0.4" % (len(fams), n))
    return 0


if __name__ == "__main__":
    sys.exit(main())
