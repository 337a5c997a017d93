#!/bin/bash
# tests/fuzz/sweep.sh - remove the private directories of fuzz targets that
# are gone (/dev/shm/flashd-fuzz-KIND.PID.XXXXXX, /tmp/...; a target killed
# by a finding leaves its directory: see tests/fuzz/tmpdir.h).
for d in /dev/shm/flashd-fuzz-*.*.* /tmp/flashd-fuzz-*.*.*; do
	[ -d "$d" ] || continue
	pid=${d#*/flashd-fuzz-*.}
	pid=${pid%%.*}
	case $pid in '' | *[!0-9]*) continue ;; esac
	kill -0 "$pid" 2>/dev/null || rm -rf "$d"
done
exit 0
