#!/bin/bash
# prepare.sh - build (once) the cache the kernel-client VM tests boot from.
#
#   tests/vm/prepare.sh        run as root; idempotent: rebuilds only what is missing
#   tests/vm/prepare.sh --systemd   also the systemd rootfs (tests/vm/test-systemd.sh)
#
# The cache lives OUTSIDE the repository, in ${FLASHD_VM_CACHE:-/var/cache/flashd-vm}
# (root-owned, like the rootfs it holds; /var/cache because it can be rebuilt
# at any time).  Layout:
#   kernel/<KV>/vmlinuz           Debian's current linux-image-<KV>-amd64 kernel
#   kernel/<KV>/lib/modules/<KV>/ only the modules the tests need (+ modules.dep)
#   kernel/<KV>/.ok               stamp: "<KV> <module list>"
#   kernel-version                <KV> of the kernel run.sh boots
#   initrd-base.cpio.gz (+.stamp) busybox-static and those modules; run.sh
#                                 prepends guest-init.sh as /init on every run
#   rootfs/ (+ .flashd-rootfs-ok) debootstrap'd bookworm (minbase) with the
#                                 client tools, stripped, same modules + depmod
#   rootfs-systemd/ (+ .flashd-systemd-ok)  only with --systemd: a copy of
#                                 rootfs/ plus $SYSTEMD_PKGS (chroot apt-get),
#                                 rebuilt when rootfs/ or the list changes
#   nandsim/ (+ .ok)              the nandsim step (tests/vm/test-nandsim.sh), apart
#                                 so that the stamps above do not change: mod/ =
#                                 nandsim.ko and the MTD modules it needs, in load
#                                 order (modules.order); root/ = mtd-utils and the
#                                 libraries flashd links that rootfs/ lacks
#                                 (dpkg-deb -x; the guest copies it over /)
#   runs/<stamp>/                 console logs of the newest runs (run.sh)
#   .lock                         flock: prepare.sh exclusive, run.sh shared
#
# Environment: FLASHD_VM_CACHE (above); VM_APT_UPDATE=1 refreshes the apt lists
# first (picks up a newer kernel ABI); DEBIAN_MIRROR, DEBIAN_SUITE override the
# debootstrap source (default http://deb.debian.org/debian bookworm).
# Host packages come from scripts/deps.sh vm (apt-get, only when missing).
set -euo pipefail

WANT_SYSTEMD=0
case ${1:-} in
--systemd) WANT_SYSTEMD=1 ;;
'') ;;
*) echo "usage: prepare.sh [--systemd]" >&2; exit 2 ;;
esac
HERE=$(cd "$(dirname "$0")" && pwd)
TOP=$(cd "$HERE/../.." && pwd)
CACHE=${FLASHD_VM_CACHE:-/var/cache/flashd-vm}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
SUITE=${DEBIAN_SUITE:-bookworm}
# Guest userland.  libnbd0: handler_flashd.so links it.  socat: bridges the
# handler's default unix socket (/run/flashd/flashd.sock) to the host's TCP port.
# fio: the verify jobs across flashd's restarts (iscsi step).  The rootfs
# stamp holds this list: a change rebuilds rootfs/ (and rootfs-systemd/).
ROOTFS_PKGS=fio,tcmu-runner,targetcli-fb,open-iscsi,nbd-client,dbus,kmod,iproute2,python3-dbus,python3-gi,e2fsprogs,util-linux,libnbd0,socat,procps
# Guest kernel modules (their dependencies are added from modules.dep):
#   virtio_pci virtio_net 9pnet_virtio 9p overlay  boot, network, rootfs + share over 9p
#   virtio_blk      the DRBD test's persistent disk per node (/var/lib/private)
#   crc32c_generic  iSCSI login and ext4 metadata_csum (TCG's CPU has no SSE4.2)
#   nbd ext4        kernel NBD client test
#   configfs target_core_mod target_core_user iscsi_target_mod  LIO + TCMU
#   iscsi_tcp sd_mod  open-iscsi initiator + SCSI disk
#   drbd            the DRBD pair test (tests/vm/test-drbd.sh; Debian 12's 8.4)
#   tcm_loop        LIO's loopback fabric (that test's figures for the other attach)
# The systemd tests' rootfs adds these (Debian 12 packages; dbus is already
# in ROOTFS_PKGS; curl for the control socket's /metrics; the libraries
# flashd links that the client rootfs lacks: libevent, libinih; drbd-utils
# for the DRBD pair test, its legacy all-resources drbd.service disabled).
SYSTEMD_PKGS="systemd systemd-sysv curl libevent-2.1-7 libevent-core-2.1-7 libevent-pthreads-2.1-7 libevent-openssl-2.1-7 libinih1 drbd-utils"
# The nandsim step's extras (cache nandsim/, below): mtd-utils for mtdinfo and
# nanddump, and the libraries flashd links that the client rootfs lacks.
NANDSIM_PKGS=mtd-utils,libevent-2.1-7,libevent-core-2.1-7,libevent-pthreads-2.1-7,libevent-openssl-2.1-7,libinih1
MODS="virtio_pci virtio_net virtio_blk 9pnet_virtio 9p overlay crc32c_generic nbd ext4 configfs \
target_core_mod target_core_user iscsi_target_mod iscsi_tcp sd_mod drbd tcm_loop"

T_START=$(date +%s)
step() { printf '== [%4ss] %s\n' "$(($(date +%s) - T_START))" "$*"; }
die() {
	echo "prepare.sh: ERROR: $*" >&2
	exit 1
}

[ "$(id -u)" = 0 ] || die "must run as root (apt-get, debootstrap, root-owned rootfs)"
case $CACHE in "$TOP" | "$TOP"/*) die "FLASHD_VM_CACHE=$CACHE is inside the repository; choose a path outside it" ;; esac
mkdir -p "$CACHE"
CACHE=$(cd "$CACHE" && pwd)
exec 9>"$CACHE/.lock"
if ! flock -n 9; then
	echo "prepare.sh: waiting for another prepare.sh/run.sh using $CACHE ..."
	flock -w 1200 9 || die "timed out waiting for the lock on $CACHE/.lock"
fi
export DEBIAN_FRONTEND=noninteractive LC_ALL=C

UPDATED=0
apt_update() {
	[ "$UPDATED" = 1 ] && return 0
	echo "apt-get update"
	apt-get update -qq
	UPDATED=1
}
[ -n "${VM_APT_UPDATE:-}" ] && apt_update

# ---------------------------------------------------------------- host packages
step "host packages (scripts/deps.sh vm)"
"$TOP/scripts/deps.sh" vm || die "scripts/deps.sh vm failed"
for c in qemu-system-x86_64 debootstrap cpio depmod busybox ss; do
	command -v "$c" >/dev/null || [ -x "/bin/$c" ] || die "$c missing after deps.sh vm"
done

# ---------------------------------------------------------------- kernel
resolve_kernel() { # prints "linux-image-<KV> <version>" from linux-image-amd64's Depends
	apt-cache show --no-all-versions linux-image-amd64 2>/dev/null |
		sed -n 's/^Depends: .*\(linux-image-[0-9][^ ,]*\) (= \([^)]*\)).*/\1 \2/p' | head -n1
}
step "kernel"
KPKG='' KVER=''
read -r KPKG KVER < <(resolve_kernel) || true
if [ -z "$KPKG" ]; then
	apt_update
	read -r KPKG KVER < <(resolve_kernel) || true
fi
[ -n "$KPKG" ] || die "cannot resolve the kernel package behind linux-image-amd64"
KV=${KPKG#linux-image-}
KDIR=$CACHE/kernel/$KV
echo "linux-image-amd64 -> $KPKG $KVER"
KSTAMP="$KV $MODS"
if [ "$(cat "$KDIR/.ok" 2>/dev/null)" != "$KSTAMP" ]; then
	DL=$(mktemp -d "$CACHE/dl.XXXXXX")
	trap 'rm -rf "$DL"' EXIT
	if ! (cd "$DL" && apt-get download -q -o APT::Sandbox::User=root "$KPKG=$KVER"); then
		# stale lists: the mirror moved on; refresh and resolve again
		apt_update
		read -r KPKG KVER < <(resolve_kernel)
		KV=${KPKG#linux-image-}
		KDIR=$CACHE/kernel/$KV
		KSTAMP="$KV $MODS"
		(cd "$DL" && apt-get download -q -o APT::Sandbox::User=root "$KPKG=$KVER") ||
			die "apt-get download $KPKG=$KVER failed"
	fi
	dpkg-deb -x "$DL"/"$KPKG"_*.deb "$DL/x"
	MD=$DL/x/lib/modules/$KV
	[ -d "$MD" ] || MD=$DL/x/usr/lib/modules/$KV
	[ -f "$MD/modules.dep" ] || depmod -b "$DL/x" "$KV"
	[ -f "$DL/x/boot/vmlinuz-$KV" ] || die "no vmlinuz-$KV in $KPKG"

	# modules we need, dependencies first
	declare -A SEEN=()
	ORDER=()
	resolve_mod() { # $1 = path relative to $MD
		local m=$1 d
		[ -n "${SEEN[$m]:-}" ] && return 0
		SEEN[$m]=1
		for d in $(grep -m1 "^$m:" "$MD/modules.dep" | cut -d: -f2); do
			resolve_mod "$d"
		done
		ORDER+=("$m")
	}
	for n in $MODS; do
		p=$(grep -m1 -E "(^|/)$n\.ko(\.[a-z]+)?:" "$MD/modules.dep" | cut -d: -f1 || true)
		if [ -z "$p" ]; then
			grep -qE "(^|/)$n\.ko$" "$MD/modules.builtin" || die "module $n not found for $KV"
			echo "  $n: built into the kernel"
			continue
		fi
		resolve_mod "$p"
	done
	rm -rf "$KDIR.new"
	mkdir -p "$KDIR.new/lib/modules/$KV"
	cp "$DL/x/boot/vmlinuz-$KV" "$KDIR.new/vmlinuz"
	: >"$KDIR.new/modules.order"
	for m in "${ORDER[@]}"; do
		dst=$KDIR.new/lib/modules/$KV/${m%.ko*}.ko
		mkdir -p "$(dirname "$dst")"
		case $m in
		*.ko) cp "$MD/$m" "$dst" ;;
		*.ko.xz) xz -dc "$MD/$m" >"$dst" ;;
		*.ko.zst) zstd -qdc "$MD/$m" >"$dst" ;;
		*.ko.gz) gzip -dc "$MD/$m" >"$dst" ;;
		*) die "unknown module format $m" ;;
		esac
		echo "/lib/modules/$KV/${m%.ko*}.ko" >>"$KDIR.new/modules.order"
	done
	for f in modules.builtin modules.builtin.modinfo modules.order; do
		[ -f "$MD/$f" ] && cp "$MD/$f" "$KDIR.new/lib/modules/$KV/"
	done
	depmod -b "$KDIR.new" "$KV"
	echo "${#ORDER[@]} modules: $(sed 's|.*/||; s|\.ko$||' "$KDIR.new/modules.order" | paste -sd' ')" | fold -s -w 100
	echo "$KSTAMP" >"$KDIR.new/.ok"
	rm -rf "$KDIR"
	mv "$KDIR.new" "$KDIR"
	rm -rf "$DL"
	trap - EXIT
else
	echo "cached: $KDIR"
fi
for old in "$CACHE"/kernel/*; do # kernels of older ABIs
	[ -d "$old" ] && [ "$old" != "$KDIR" ] && { echo "removing old $old"; rm -rf "$old"; }
done

# ---------------------------------------------------------------- initramfs
step "initramfs (busybox + modules)"
BB_VER=$(dpkg-query -W -f='${Version}' busybox-static 2>/dev/null || echo unknown)
ISTAMP="$KSTAMP busybox-static=$BB_VER"
if [ "$(cat "$CACHE/initrd-base.stamp" 2>/dev/null)" != "$ISTAMP" ] || [ ! -s "$CACHE/initrd-base.cpio.gz" ]; then
	IR=$(mktemp -d "$CACHE/initrd.XXXXXX")
	trap 'rm -rf "$IR"' EXIT
	mkdir -p "$IR"/{bin,sbin,etc,proc,sys,dev,tmp,run,lower,rw,newroot,usr/bin,usr/sbin}
	cp /bin/busybox "$IR/bin/busybox"
	# `busybox --list` names busybox itself: linking that would replace the
	# binary by a symlink to itself (exec fails with ELOOP, "error -40").
	for a in $("$IR/bin/busybox" --list); do
		[ "$a" = busybox ] || ln -s busybox "$IR/bin/$a"
	done
	cp -a "$KDIR/lib" "$IR/"
	cp "$KDIR/modules.order" "$IR/etc/modules.order"
	(cd "$IR" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc -R 0:0 --quiet) |
		gzip -9 >"$CACHE/initrd-base.cpio.gz.tmp"
	mv "$CACHE/initrd-base.cpio.gz.tmp" "$CACHE/initrd-base.cpio.gz"
	echo "$ISTAMP" >"$CACHE/initrd-base.stamp"
	rm -rf "$IR"
	trap - EXIT
else
	echo "cached: $CACHE/initrd-base.cpio.gz"
fi

# ---------------------------------------------------------------- rootfs
ROOTFS=$CACHE/rootfs
RSTAMP="$SUITE $MIRROR $ROOTFS_PKGS"
step "rootfs ($SUITE minbase + $ROOTFS_PKGS)"
if [ "$(cat "$ROOTFS/.flashd-rootfs-ok" 2>/dev/null)" != "$RSTAMP" ]; then
	rm -rf "$ROOTFS" "$ROOTFS.partial"
	t=$(date +%s)
	if ! debootstrap --variant=minbase --include="$ROOTFS_PKGS" "$SUITE" "$ROOTFS.partial" "$MIRROR" \
		>"$CACHE/debootstrap.log" 2>&1; then
		tail -n 30 "$CACHE/debootstrap.log"
		die "debootstrap failed (full log: $CACHE/debootstrap.log)"
	fi
	echo "debootstrap took $(($(date +%s) - t))s"
	R=$ROOTFS.partial
	# strip what a throw-away test VM never reads
	rm -rf "$R"/var/cache/apt/*.bin "$R"/var/cache/apt/archives/*.deb "$R"/var/lib/apt/lists/* \
		"$R"/usr/share/doc/* "$R"/usr/share/man/* "$R"/usr/share/info/* "$R"/var/log/*
	find "$R/usr/share/locale" -mindepth 1 -maxdepth 1 ! -name locale.alias -exec rm -rf {} +
	[ -s "$R/etc/machine-id" ] || tr -d '-' </proc/sys/kernel/random/uuid >"$R/etc/machine-id"
	echo "InitiatorName=iqn.1993-08.org.debian:01:flashd-vmtest" >"$R/etc/iscsi/initiatorname.iscsi"
	chmod 600 "$R/etc/iscsi/initiatorname.iscsi"
	# The guest starts tcmu-runner itself.  D-Bus activation would spawn extra
	# runners whenever targetcli talks to org.kernel.TCMUService1 first.
	svc=$R/usr/share/dbus-1/system-services/org.kernel.TCMUService1.service
	[ -f "$svc" ] && mv -f "$svc" "$svc.disabled"
	mkdir -p "$R/vmtest" # mount point of the per-run 9p share
	echo "$RSTAMP" >"$R/.flashd-rootfs-ok"
	mv "$R" "$ROOTFS"
else
	echo "cached: $ROOTFS"
fi

# tcmu-runner looks target_core_user up through libkmod at start-up, which
# needs /lib/modules/$(uname -r)/modules.dep even though stage 1 loaded it.
step "rootfs modules ($KV)"
if [ "$(cat "$ROOTFS/.flashd-modules-ok" 2>/dev/null)" != "$KSTAMP" ]; then
	rm -rf "$ROOTFS"/lib/modules/*
	mkdir -p "$ROOTFS/lib/modules"
	cp -a "$KDIR/lib/modules/$KV" "$ROOTFS/lib/modules/"
	echo "$KSTAMP" >"$ROOTFS/.flashd-modules-ok"
else
	echo "cached"
fi
# ---------------------------------------------------------------- systemd rootfs
if [ "$WANT_SYSTEMD" = 1 ]; then
	SROOT=$CACHE/rootfs-systemd
	SSTAMP="$RSTAMP | $KSTAMP | $SYSTEMD_PKGS"
	step "systemd rootfs (rootfs + $SYSTEMD_PKGS)"
	if [ "$(cat "$SROOT/.flashd-systemd-ok" 2>/dev/null)" != "$SSTAMP" ]; then
		rm -rf "$SROOT" "$SROOT.partial"
		S=$SROOT.partial
		cp -a "$ROOTFS" "$S"
		rm -f "$S/.flashd-rootfs-ok" "$S/.flashd-modules-ok"
		chroot_umount() {
			local m
			for m in dev/pts dev proc sys; do
				mountpoint -q "$S/$m" && umount -l "$S/$m"
			done
			return 0
		}
		trap 'chroot_umount' EXIT
		mount -t proc proc "$S/proc"
		mount -t sysfs sysfs "$S/sys"
		mount --bind /dev "$S/dev"
		mount --bind /dev/pts "$S/dev/pts"
		cp -L /etc/resolv.conf "$S/etc/resolv.conf"
		# no daemon starts inside the chroot
		printf '#!/bin/sh\nexit 101\n' >"$S/usr/sbin/policy-rc.d"
		chmod 755 "$S/usr/sbin/policy-rc.d"
		t=$(date +%s)
		if ! { chroot "$S" apt-get update -qq &&
			chroot "$S" apt-get install -y -q --no-install-recommends $SYSTEMD_PKGS; } \
			>"$CACHE/systemd-apt.log" 2>&1; then
			chroot_umount
			tail -n 30 "$CACHE/systemd-apt.log"
			die "apt-get install $SYSTEMD_PKGS in the chroot failed (log: $CACHE/systemd-apt.log)"
		fi
		echo "apt-get install $SYSTEMD_PKGS took $(($(date +%s) - t))s"
		# deploy/drbd/README.md: one drbd@RES.service per resource instead
		chroot "$S" systemctl disable drbd.service >/dev/null 2>&1 || true
		chroot_umount
		trap - EXIT
		rm -f "$S/usr/sbin/policy-rc.d" "$S/etc/resolv.conf"
		rm -rf "$S"/var/cache/apt/*.bin "$S"/var/cache/apt/archives/*.deb "$S"/var/lib/apt/lists/* \
			"$S"/usr/share/doc/* "$S"/usr/share/man/*
		[ -x "$S/lib/systemd/systemd" ] || die "no /lib/systemd/systemd in $S"
		echo "$SSTAMP" >"$S/.flashd-systemd-ok"
		mv "$S" "$SROOT"
	else
		echo "cached: $SROOT"
	fi
fi

# ---------------------------------------------------------------- nandsim step
step "nandsim step (nandsim.ko + $NANDSIM_PKGS)"
NDIR=$CACHE/nandsim
NSTAMP="$KV $KVER $NANDSIM_PKGS"
if [ "$(cat "$NDIR/.ok" 2>/dev/null)" != "$NSTAMP" ]; then
	DL=$(mktemp -d "$CACHE/dl.XXXXXX")
	trap 'rm -rf "$DL"' EXIT
	(cd "$DL" && apt-get download -q -o APT::Sandbox::User=root "$KPKG=$KVER" ${NANDSIM_PKGS//,/ }) ||
		die "apt-get download $KPKG=$KVER ${NANDSIM_PKGS//,/ } failed (VM_APT_UPDATE=1 refreshes the lists)"
	dpkg-deb -x "$DL"/"$KPKG"_*.deb "$DL/k"
	MD=$DL/k/lib/modules/$KV
	[ -d "$MD" ] || MD=$DL/k/usr/lib/modules/$KV
	[ -f "$MD/modules.dep" ] || depmod -b "$DL/k" "$KV"
	rm -rf "$NDIR.new"
	mkdir -p "$NDIR.new/mod" "$NDIR.new/root"
	for d in "$DL"/*.deb; do
		[[ $d == */"$KPKG"_* ]] || dpkg-deb -x "$d" "$NDIR.new/root"
	done
	rm -rf "$NDIR.new/root/usr/share"
	# nandsim and what it needs, dependencies first, minus what stage 1 loads
	declare -A NSEEN=()
	for m in $(sed 's|^/lib/modules/[^/]*/||' "$KDIR/modules.order"); do NSEEN[$m]=1; done
	nand_mod() {
		local m=$1 d
		[ -n "${NSEEN[${m%.ko*}.ko]:-}" ] && return 0
		NSEEN[${m%.ko*}.ko]=1
		for d in $(grep -m1 "^$m:" "$MD/modules.dep" | cut -d: -f2); do
			nand_mod "$d"
		done
		local dst=$NDIR.new/mod/$(basename "${m%.ko*}").ko
		case $m in
		*.ko) cp "$MD/$m" "$dst" ;;
		*.ko.xz) xz -dc "$MD/$m" >"$dst" ;;
		*.ko.zst) zstd -qdc "$MD/$m" >"$dst" ;;
		*.ko.gz) gzip -dc "$MD/$m" >"$dst" ;;
		*) die "unknown module format $m" ;;
		esac
		basename "$dst" >>"$NDIR.new/mod/modules.order"
	}
	p=$(grep -m1 -E "(^|/)nandsim\.ko(\.[a-z]+)?:" "$MD/modules.dep" | cut -d: -f1) ||
		die "no nandsim module in $KPKG"
	nand_mod "$p"
	echo "modules: $(paste -sd' ' "$NDIR.new/mod/modules.order")"
	[ -x "$NDIR.new/root/usr/sbin/nanddump" ] || die "no nanddump in mtd-utils"
	echo "$NSTAMP" >"$NDIR.new/.ok"
	rm -rf "$NDIR"
	mv "$NDIR.new" "$NDIR"
	rm -rf "$DL"
	trap - EXIT
else
	echo "cached: $NDIR"
fi

echo "$KV" >"$CACHE/kernel-version.tmp"
mv "$CACHE/kernel-version.tmp" "$CACHE/kernel-version"

step "done: kernel $KV; cache $(du -sh "$CACHE" | cut -f1) in $CACHE; took $(($(date +%s) - T_START))s"
