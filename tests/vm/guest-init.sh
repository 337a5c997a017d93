#!/bin/sh
# guest-init.sh - stage 1 of the test VM: PID 1 of the busybox initramfs
# (run.sh installs it as /init on every run).
#
# Loads the kernel modules (the order comes from prepare.sh), brings up
# slirp networking (guest 10.0.2.15; the host's 127.0.0.1 is 10.0.2.2),
# mounts the cached Debian rootfs (9p tag "rootfs", read-only) under a tmpfs
# overlay, mounts the per-run share (9p tag "vmtest", read-write: test
# scripts, handler, config in; host requests, acks and logs both ways) on
# /vmtest, chroots into /vmtest/guest-test.sh and powers off.
#
# vmtest=systemd (tests/vm/test-systemd.sh) and vmtest=drbd (one node of
# tests/vm/test-drbd.sh; the rootfs is then prepare.sh's rootfs-systemd):
# copies the share's root/ (make install DESTDIR=, PREFIX=/usr) and the
# oneshot unit flashd-vmtest@.service into the overlay, moves /dev, /proc,
# /sys into it and switch_roots into /lib/systemd/systemd as PID 1.  The
# unit runs /vmtest/guest-<step>.sh and powers the VM off.  For drbd, the
# kernel command line may also carry vmtest.peer=ADDR/PREFIX (the address
# of the second NIC, eth1: the link to the other node) and a first virtio
# disk (/dev/vda, ext4) is the node's persistent /var/lib/private, where
# flashd.service (DynamicUser) keeps its state: it outlives the VM.
# Serial console markers: "@@ t=<guest uptime> ...".
export PATH=/bin:/sbin:/usr/bin:/usr/sbin

mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev

up() { read -r u _ </proc/uptime; echo "$u"; }
log() { echo "@@ t=$(up) $*"; }
finish() {
	log "ALL DONE rc=$1"
	# Nothing needs syncing (tmpfs overlay; the share is written through).
	# A hung test device would block sync(2) and even an orderly power-off
	# (sd sends SYNCHRONIZE CACHE), so arm an emergency reset first; qemu
	# runs with -no-reboot and exits on it.  poweroff -n: no sync.
	(sleep 15; echo b >/proc/sysrq-trigger) &
	poweroff -n -f
	sleep 60
}
die() {
	log "STAGE1 FAIL: $*"
	finish 99
}

log "stage1: kernel $(uname -r)"

# Nothing auto-loads modules here (request_module() finds no modprobe), so
# insmod everything in dependency order.  "Unable to load target_core_*"
# lines on the console are harmless: only the user backstore is used.
n=0
while read -r m; do
	if insmod "$m" 2>/tmp/insmod.err; then
		n=$((n + 1))
	else
		grep -q 'File exists' /tmp/insmod.err || log "insmod $m failed: $(cat /tmp/insmod.err)"
	fi
done </etc/modules.order
log "stage1: $n modules loaded"

ip link set lo up &&
	ip link set eth0 up &&
	ip addr add 10.0.2.15/24 dev eth0 &&
	ip route add default via 10.0.2.2 || die "network setup failed"

mount -t configfs configfs /sys/kernel/config || die "configfs mount failed"
mount -t 9p -o ro,trans=virtio,version=9p2000.L,msize=512000,cache=loose rootfs /lower ||
	die "9p mount of the rootfs failed"
mount -t tmpfs -o mode=0755 rw /rw && mkdir -p /rw/upper /rw/work
mount -t overlay overlay -o lowerdir=/lower,upperdir=/rw/upper,workdir=/rw/work /newroot ||
	die "overlay mount failed"
R=/newroot
mkdir -p /dev/pts /dev/shm "$R/vmtest"
mount -t devpts devpts /dev/pts
mount -t tmpfs -o mode=1777 shm /dev/shm
ln -sf /proc/self/fd /dev/fd
ln -sf /proc/self/fd/0 /dev/stdin
ln -sf /proc/self/fd/1 /dev/stdout
ln -sf /proc/self/fd/2 /dev/stderr
T=$(sed -n 's/.*vmtest=\([a-z0-9,]*\).*/\1/p' /proc/cmdline)
if [ "$T" = systemd ] || [ "$T" = drbd ]; then
	mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000,cache=none vmtest $R/vmtest ||
		die "9p mount of the run share failed"
	[ -r $R/vmtest/guest-$T.sh ] && [ -r $R/vmtest/flashd-vmtest@.service ] ||
		die "no guest-$T.sh / flashd-vmtest@.service in the run share"
	[ -x $R/lib/systemd/systemd ] || die "no /lib/systemd/systemd in the rootfs (prepare.sh --systemd)"
	# the freshly installed tree (make install DESTDIR=share/root PREFIX=/usr)
	[ -x $R/vmtest/root/usr/sbin/flashd ] || die "no make install tree in the run share"
	# top-level directories may be merged-/usr symlinks here (lib -> usr/lib)
	for d in $R/vmtest/root/*; do
		dst=$R/${d##*/}
		[ -L "$dst" ] && dst=$R/$(readlink "$dst")
		mkdir -p "$dst" && cp -a "$d/." "$dst/" || die "copying the installed tree ($d) failed"
	done
	cp $R/vmtest/flashd-vmtest@.service $R/etc/systemd/system/ &&
		mkdir -p $R/etc/systemd/system/multi-user.target.wants &&
		ln -sf ../flashd-vmtest@.service \
			$R/etc/systemd/system/multi-user.target.wants/flashd-vmtest@$T.service ||
		die "installing flashd-vmtest@$T.service failed"
	PEER=$(sed -n 's/.*vmtest\.peer=\([0-9./]*\).*/\1/p' /proc/cmdline)
	if [ -n "$PEER" ]; then
		ip link set eth1 up && ip addr add "$PEER" dev eth1 || die "peer link eth1 ($PEER) setup failed"
		log "stage1: peer link eth1 $PEER"
	fi
	if [ "$T" = drbd ] && [ -b /dev/vda ]; then
		mkdir -p $R/var/lib/private &&
			mount -t ext4 /dev/vda $R/var/lib/private && chmod 0700 $R/var/lib/private ||
			die "mounting the persistent disk /dev/vda on /var/lib/private failed"
		log "stage1: persistent disk /dev/vda on /var/lib/private"
	fi
	# no login prompt on the test console
	ln -sf /dev/null $R/etc/systemd/system/serial-getty@ttyS0.service
	ln -sf /dev/null $R/etc/systemd/system/getty@tty1.service
	umount /dev/pts /dev/shm
	mount --move /dev $R/dev && mount --move /sys $R/sys && mount --move /proc $R/proc ||
		die "moving /dev, /sys, /proc into the new root failed"
	echo "@@ t=$(cut -d' ' -f1 $R/proc/uptime) stage1: switch_root into systemd"
	exec switch_root $R /lib/systemd/systemd
	# switch_root only returns on failure (and /proc is gone by now)
	echo "@@ STAGE1 FAIL: switch_root failed"
	poweroff -n -f
fi
mount -t proc proc $R/proc
mount -o rbind /sys $R/sys
mount -o rbind /dev $R/dev
mount -t tmpfs -o mode=0755 run $R/run
mount -t tmpfs -o mode=1777 tmp $R/tmp
# the per-run share: no caching, so files the host writes show up at once
mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000,cache=none vmtest $R/vmtest ||
	die "9p mount of the run share failed"
[ -r $R/vmtest/guest-test.sh ] || die "no guest-test.sh in the run share"
log "stage1: rootfs (9p ro + tmpfs overlay) and run share mounted"

chroot $R /bin/bash /vmtest/guest-test.sh "$T"
finish $?
