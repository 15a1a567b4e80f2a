#!/bin/sh
# stage2.sh — second stage of the VM lane guest: PID 1 (root) on the overlay root that init.sh switched to.
#
# Sets the guest up the way a systemd host runs lensboxd, then runs the selected tests and reports:
#   - proc, sysfs, devpts, /dev/shm, tmpfs on /run and /tmp (carried /tmp paths bound back); cgroup2 on
#     /sys/fs/cgroup with systemd's options;
#   - every available controller enabled in the root's subtree_control, PID 1 in init.scope; launch.py makes
#     the rest of the systemd-like layout (the tests' scope and the delegated lensbox.service, see there);
#   - runs /lensbox-vm/launch.py (pytest with the host's selection) with output on the console and on the
#     results disk, then writes the exit status there and prints "LENSBOX-VM-RESULT rc=N" on the console.
# Invariant: whatever happens, the last thing is a result marker (or none, which the host treats as failure)
# followed by power-off.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
# shellcheck disable=SC3040 # busybox ash has pipefail
set -o pipefail
result() {
	echo "$1" >/results/rc
	dmesg >/results/dmesg.txt 2>&1
	sync
	umount /results
	echo "LENSBOX-VM-RESULT rc=$1"
	poweroff -f
}
echo "LENSBOX-VM-STAGE2 started"
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mkdir -p /dev/pts /dev/shm
mount -t devpts -o newinstance,ptmxmode=0666,mode=0620 devpts /dev/pts
mount -t tmpfs -o mode=1777 shm /dev/shm
mount -t tmpfs -o mode=0755 run /run
# /tmp is a tmpfs, as on the hosts lensbox runs on (overlayfs has no O_TMPFILE before 6.6, and lensboxd stages
# downloads with it). Whatever run-vm carried under /tmp (CI may clone the source tree there) stays visible at its
# host path: each entry of the overlay's /tmp is bind-mounted back onto the tmpfs.
mkdir -p /run/overlay-tmp
mount --bind /tmp /run/overlay-tmp
mount -t tmpfs -o mode=1777 tmp /tmp
for e in /run/overlay-tmp/* /run/overlay-tmp/.[!.]*; do
	[ -e "$e" ] || continue
	n=${e##*/}
	if [ -d "$e" ]; then mkdir "/tmp/$n"; else touch "/tmp/$n"; fi
	mount --bind "$e" "/tmp/$n"
done
mount -t ext4 /dev/vdb /results || { echo "LENSBOX-VM-STAGE2-FAILED: results disk"; poweroff -f; }
hostname lensbox-vm
ip link set lo up 2>/dev/null

cg=/sys/fs/cgroup
mount -t cgroup2 -o nsdelegate,memory_recursiveprot cgroup2 $cg || result 5
for c in $(cat $cg/cgroup.controllers); do echo "+$c" >$cg/cgroup.subtree_control || result 5; done
{ mkdir $cg/init.scope && echo $$ >$cg/init.scope/cgroup.procs; } || result 5
{
	echo "kernel $(uname -r)"
	echo "controllers $(cat $cg/cgroup.controllers)"
	echo "root subtree_control $(cat $cg/cgroup.subtree_control)"
	cat /sys/kernel/security/lsm 2>/dev/null && echo
} | tee /results/facts.txt

(
	exec python3 /lensbox-vm/launch.py
) 2>&1 | tee /results/pytest.log
rc=$?
result $rc
