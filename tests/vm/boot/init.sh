#!/bin/busybox sh
# shellcheck shell=dash
# init.sh — first stage of the VM lane guest, /init of the initramfs; runs as PID 1 (root) inside the QEMU guest.
#
# Loads the modules run-vm listed (in dependency order), mounts the read-only payload disk and builds the real
# root: an overlay of the payload's tree under a tmpfs (writable, discarded at power-off), then switch_root into it.
# Why not stay in the initramfs: its root is rootfs, which pivot_root(2) refuses to move, and lensbox's runner
# pivot_roots into each sandbox. Any failure here prints a marker and powers off so the host fails fast.
export PATH=/bin
fail() {
	echo "LENSBOX-VM-STAGE1-FAILED: $*"
	echo "LENSBOX-VM-RESULT rc=4"
	poweroff -f
}
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
while read -r m; do
	[ -n "$m" ] || continue
	insmod "/modules/$m" || fail "insmod $m"
done </modules/order
# virtio disks appear asynchronously after their driver loads.
i=0
while [ ! -b /dev/vda ] || [ ! -b /dev/vdb ]; do
	i=$((i + 1))
	[ $i -le 100 ] || fail "no /dev/vda and /dev/vdb after 10s"
	sleep 0.1
done
mount -t ext4 -o ro /dev/vda /payload || fail "mount payload"
mount -t tmpfs -o mode=0755 upper /upper || fail "mount tmpfs"
mkdir -p /upper/rw /upper/work
mount -t overlay -o lowerdir=/payload,upperdir=/upper/rw,workdir=/upper/work root /newroot || fail "mount overlay"
mkdir -p /newroot/lib/modules
cp /modules/* /newroot/lib/modules/
umount /proc /sys
mount --move /dev /newroot/dev
# shellcheck disable=SC2093 # exec only returns when switch_root failed
exec switch_root /newroot /bin/sh /lensbox-vm/stage2.sh
fail "switch_root"
