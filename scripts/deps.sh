#!/bin/sh
# deps.sh - install the Debian 12 packages flashd needs, only when missing.
#
#   scripts/deps.sh build   compiler and -dev libraries for `make`
#   scripts/deps.sh check   build + the real clients the tests drive
#   scripts/deps.sh bench   check + the peers `make bench` compares against
#   scripts/deps.sh vm      check + qemu, debootstrap (kernel client tests),
#                           e2fsprogs (mkfs.ext4 of the DRBD test nodes' disks)
#   scripts/deps.sh fuzz    build + clang and its libFuzzer runtime (`make fuzz`)
#
# check includes chromium: tests/test-dashboard.sh loads the dashboard in it
# (headless); and systemd: tests/test-install.sh runs systemd-analyze verify
# on the unit (nothing is started).
# check also puts promtool (Prometheus' checker, for /metrics and the
# rules of deploy/prometheus) and prometheus itself (tests/test-prometheus.sh
# runs it on a port of its own) in build/tools: taken out of Debian's
# prometheus package, not installed, because installing the package starts
# a Prometheus server on :9090.
#
# Runs apt-get only when dpkg reports a package as not installed, so a
# machine that has everything pays one dpkg-query call.  Needs root (or sudo)
# to install; prints what is missing and fails otherwise.
set -eu

build_pkgs="gcc make pkg-config libevent-dev libssl-dev libnbd-dev nbdkit-plugin-dev libsystemd-dev libinih-dev"
check_pkgs="nbdkit libnbd-bin python3-libnbd qemu-utils fio iproute2 python3 curl gnutls-bin openssl man-db groff-base chromium systemd"
bench_pkgs="nbdkit qemu-utils fio procps gnuplot-nox"
vm_pkgs="qemu-system-x86 busybox-static cpio debootstrap kmod gzip e2fsprogs"
fuzz_pkgs="clang libclang-rt-14-dev"

top=$(cd "$(dirname "$0")/.." && pwd)

# promtool and prometheus from the prometheus .deb (apt-get download: no
# root, nothing installed or started); a warning here if they cannot be had
# (make run does not need them), a failure of the tests that use them under
# make check
fetch_promtool() {
	dest=$top/build/tools
	[ -x "$dest/promtool" ] && [ -x "$dest/prometheus" ] && return 0
	tmp=$(mktemp -d)
	if (cd "$tmp" && apt-get download -q prometheus >/dev/null 2>&1) &&
	   dpkg-deb -x "$tmp"/prometheus_*.deb "$tmp/x" && [ -x "$tmp/x/usr/bin/promtool" ] &&
	   [ -x "$tmp/x/usr/bin/prometheus" ]; then
		mkdir -p "$dest"
		cp "$tmp/x/usr/bin/promtool" "$tmp/x/usr/bin/prometheus" "$dest/"
	else
		echo "deps.sh: could not fetch promtool and prometheus (Debian package prometheus); tests/test-manage-metrics.sh and tests/test-prometheus.sh fail under make check without them" >&2
	fi
	rm -rf "$tmp"
}

want=$build_pkgs
promtool=
for what in "$@"; do
	case $what in
	build) ;;
	check) want="$want $check_pkgs"; promtool=1 ;;
	bench) want="$want $check_pkgs $bench_pkgs"; promtool=1 ;;
	vm) want="$want $check_pkgs $vm_pkgs"; promtool=1 ;;
	fuzz) want="$want $fuzz_pkgs" ;;
	*) echo "deps.sh: unknown set '$what' (build, check, bench, vm, fuzz)" >&2; exit 2 ;;
	esac
done

missing=
for p in $want; do
	case " $missing " in *" $p "*) continue ;; esac
	st=$(dpkg-query -W -f '${db:Status-Status}' "$p" 2>/dev/null || true)
	[ "$st" = installed ] || missing="$missing $p"
done
if [ -z "$missing" ]; then
	[ -z "$promtool" ] || fetch_promtool
	exit 0
fi

echo "deps.sh: installing:$missing" >&2
if [ "$(id -u)" = 0 ]; then
	sudo=
elif command -v sudo >/dev/null 2>&1; then
	sudo="sudo -n"
else
	echo "deps.sh: not root and no sudo; install these packages:$missing" >&2
	exit 1
fi
export DEBIAN_FRONTEND=noninteractive
# a fresh machine may have empty package lists
if ! $sudo apt-get install -y -q --no-install-recommends $missing; then
	$sudo apt-get update -q
	$sudo apt-get install -y -q --no-install-recommends $missing
fi
[ -z "$promtool" ] || fetch_promtool
