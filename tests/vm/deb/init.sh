#!/bin/busybox sh
# shellcheck shell=dash
# init.sh — /init of the package test's initramfs (tests/vm/deb); PID 1 (root) in the QEMU guest, briefly.
#
# Loads the modules debvm.py listed (virtio disks, loop, overlay, veth, nf_tables...: the Debian image has no
# initramfs-tools and no modules of this kernel), mounts the Debian root image (/dev/vda, a QEMU snapshot: writes
# are discarded) read-write and hands over to systemd. Any failure prints the result marker and powers off.
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
i=0
while [ ! -b /dev/vda ]; do
	i=$((i + 1))
	[ $i -le 100 ] || fail "no /dev/vda after 10s"
	sleep 0.1
done
mount -t ext4 /dev/vda /newroot || fail "mount root"
umount /proc /sys
mount --move /dev /newroot/dev
# shellcheck disable=SC2093 # exec only returns when switch_root failed
exec switch_root /newroot /lib/systemd/systemd
fail "switch_root"
