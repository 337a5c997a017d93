#!/bin/sh
# deps.sh - install the Debian 12 packages flashd needs, only when missing.
#
#   scripts/deps.sh build   compiler and -dev libraries for `make`
#   scripts/deps.sh check   build + the real clients the tests drive
#   scripts/deps.sh bench   check + the peers `make bench` compares against
#   scripts/deps.sh vm      check + qemu, debootstrap (kernel client tests)
#
# Runs apt-get only when dpkg reports a package as not installed, so a
# machine that has everything pays one dpkg-query call.  Needs root (or sudo)
# to install; prints what is missing and fails otherwise.
set -eu

build_pkgs="gcc make pkg-config libevent-dev libssl-dev libnbd-dev nbdkit-plugin-dev libsystemd-dev libinih-dev"
check_pkgs="nbdkit libnbd-bin python3-libnbd qemu-utils fio iproute2 python3 curl prometheus"
bench_pkgs="nbdkit qemu-utils fio procps gnuplot-nox"
vm_pkgs="qemu-system-x86 busybox-static cpio debootstrap kmod gzip"

want=$build_pkgs
for what in "$@"; do
	case $what in
	build) ;;
	check) want="$want $check_pkgs" ;;
	bench) want="$want $check_pkgs $bench_pkgs" ;;
	vm) want="$want $check_pkgs $vm_pkgs" ;;
	*) echo "deps.sh: unknown set '$what' (build, check, bench, vm)" >&2; exit 2 ;;
	esac
done

missing=
for p in $want; do
	case " $missing " in *" $p "*) continue ;; esac
	st=$(dpkg-query -W -f '${db:Status-Status}' "$p" 2>/dev/null || true)
	[ "$st" = installed ] || missing="$missing $p"
done
[ -z "$missing" ] && exit 0

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
