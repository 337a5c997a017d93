#!/bin/bash
# timeout: 60
# quick
# The documentation's links (README.md, doc/*.md; no server, no network):
#   1. README.md, the user's page, stays under 250 lines (the rest is doc/);
#   2. every relative link and image in README.md and doc/*.md, outside code
#      spans and code blocks, names a file or directory that exists, and its
#      #anchor (also a link within the same file) matches a heading of the
#      target as GitHub makes anchors: the heading's text without its
#      markup, lowercased, every character but letters, digits, spaces, "-"
#      and "_" dropped, spaces turned into "-", and "-1", "-2"... appended to
#      repeats;
#   3. the checker itself finds a broken file link and a broken anchor.
source "$(dirname "$0")/functions.sh"
requires python3
cd "$top"

lines=$(wc -l <README.md)
[ "$lines" -lt 250 ] || fail "README.md has $lines lines; it must stay under 250 (move the detail to doc/)"
ok "README.md: $lines lines"

# check_links FILE...: prints one line per broken link, exits 1 if any
check_links() {
	python3 - "$@" <<'EOF'
import os, re, sys

def plain(text):
    text = re.sub(r'!?\[([^\]]*)\]\([^)]*\)', r'\1', text)   # links, images: their text
    return text.replace('`', '').replace('*', '')

cache = {}
def anchors(path):
    if path in cache:
        return cache[path]
    seen, out, fence = {}, set(), False
    for line in open(path, encoding='utf-8'):
        if line.startswith('```'):
            fence = not fence
        m = None if fence else re.match(r'(#{1,6})\s+(.*?)\s*#*\s*$', line)
        if not m:
            continue
        a = re.sub(r'[^\w\- ]', '', plain(m.group(2)).lower()).replace(' ', '-')
        n = seen.get(a, 0)
        seen[a] = n + 1
        out.add(a if n == 0 else '%s-%d' % (a, n))
    cache[path] = out
    return out

bad = 0
for path in sys.argv[1:]:
    fence = False
    for no, line in enumerate(open(path, encoding='utf-8'), 1):
        if line.startswith('```'):
            fence = not fence
        if fence or line.startswith('    ') or line.startswith('\t'):
            continue
        line = re.sub(r'`[^`]*`', '', line)
        for target in re.findall(r'\]\(([^)\s]+)\)', line):
            if re.match(r'[a-z][a-z0-9+.-]*:', target):
                continue                # http:, https:, mailto:
            file, _, anchor = target.partition('#')
            dest = os.path.normpath(os.path.join(os.path.dirname(path), file)) if file else path
            if not os.path.exists(dest):
                print('%s:%d: %s: no such file %s' % (path, no, target, dest))
                bad += 1
            elif anchor and (not dest.endswith('.md') or anchor not in anchors(dest)):
                print('%s:%d: %s: no heading for #%s in %s' % (path, no, target, anchor, dest))
                bad += 1
sys.exit(1 if bad else 0)
EOF
}

files=(README.md doc/*.md)
[ "${#files[@]}" -ge 10 ] || fail "doc/*.md: only ${files[*]}"
check_links "${files[@]}" >"$T/links.txt" || { cat "$T/links.txt"; fail "broken links (above)"; }
n=$(cat "${files[@]}" | grep -o '](' | wc -l)
ok "${#files[@]} files, $n links and images: every file and anchor found"

# ---- 3. the checker finds what it must ------------------------------------
mkdir -p "$T/doc"
printf '# Top\n\n## A `code` heading: (punctuation) & more\n\n## Twice\n\n## Twice\n' >"$T/doc/a.md"
printf '[ok](a.md#a-code-heading-punctuation--more) [ok](a.md#twice-1) [ok](#b) `[not a link](x.md)`\n\n# B\n' >"$T/doc/b.md"
check_links "$T/doc/a.md" "$T/doc/b.md" >"$T/good.txt" || { cat "$T/good.txt"; fail "the checker refuses good links"; }
printf '[gone](c.md) [no anchor](a.md#twice-2) [here](#nothing)\n' >"$T/doc/c-bad.md"
check_links "$T/doc/c-bad.md" >"$T/bad.txt" && fail "the checker passes broken links"
[ "$(wc -l <"$T/bad.txt")" = 3 ] || { cat "$T/bad.txt"; fail "the checker found not exactly the 3 broken links"; }
ok "the checker finds a missing file, a missing anchor and a missing local anchor"
