#!/bin/bash
# Runs as PID 1 inside the real-stack VM (after realstack/initramfs-init),
# on the host's root filesystem mounted read-only. Brings up the real stack
# — the kernel's Bluetooth with hci_vhci, the distribution's dbus-daemon and
# bluetoothd — then the Bumble bench (realstack/bench.py: a controller on
# /dev/vhci and N SBeacons on its link), runs the scenario the kernel
# command line names, writes everything to the "out" share and powers off.
set -u
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts /dev/shm && mount -t devpts devpts /dev/pts && mount -t tmpfs tmpfs /dev/shm
# Writable places on the read-only root: bluetoothd's storage, dbus's
# socket, every temporary file. The inventory lives here too (9p cannot hold
# SQLite's WAL index: mmap fails), and is copied to the out share.
for dir in /run /tmp /var/tmp /var/lib/bluetooth; do mount -t tmpfs tmpfs "$dir"; done
mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 out /mnt || { echo "realstack: no out share"; /bin/busybox poweroff -f; }
arg() { sed -n "s/.*realstack\.$1=\([^ ]*\).*/\1/p" /proc/cmdline; }
here=$(dirname "$(readlink -f "$0")")
out=/mnt
mkdir -p /tmp/home
export HOME=/tmp/home TMPDIR=/tmp PYTHONDONTWRITEBYTECODE=1
ip link set lo up 2>/dev/null
stamp() { echo "realstack: $* at $(cut -d' ' -f1 /proc/uptime) s"; }
echo
stamp "guest up"

# The logs are written on the guest's tmpfs and copied out at the end: on
# the 9p share every line is a round trip to the host, and bluetoothd -d
# writes thousands, blocking its main loop on each (docs/realstack.md:
# StopDiscovery answered too late).
finish() {
  for log in hci.btsnoop bluetoothd.log bench.log dbus-monitor.txt; do cp "/tmp/$log" "$out/$log" 2>/dev/null; done
  sync
  stamp "guest done"
  /bin/busybox poweroff -f
}
trap finish EXIT

modprobe hci_vhci || { echo "realstack: skipped: modprobe hci_vhci failed in the guest kernel" | tee "$out/skipped"; exit 0; }
[ -c /dev/vhci ] || { echo "realstack: skipped: no /dev/vhci in the guest" | tee "$out/skipped"; exit 0; }
# Every HCI packet between the kernel and the vhci controller, for the
# record (read it on the host: btmon -r OUT/hci.btsnoop).
btmon -w /tmp/hci.btsnoop > /dev/null 2>&1 &
mkdir -p /run/dbus
dbus-daemon --system --fork --nopidfile || { echo "realstack: dbus-daemon failed"; exit 0; }
/usr/libexec/bluetooth/bluetoothd -n -d > /tmp/bluetoothd.log 2>&1 &
stamp "dbus-daemon and bluetoothd started"

# The scenario: realstack/scenario.sh sourced with the bench's settings.
export REALSTACK_OUT=$out REALSTACK_DIR=$here
export REALSTACK_BEACONS=$(arg beacons) REALSTACK_ARRIVING=$(arg arriving) REALSTACK_BIN=$(arg bin) REALSTACK_SCENARIO=$(arg scenario) REALSTACK_PYTHON=$(arg python)
source "$here/scenario.sh"
