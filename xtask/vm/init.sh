#!/bin/sh
# /init of the fdprof vm-test guest. `cargo xtask vm-test` fills in the steps (see
# xtask/src/vm_test/guest.rs) and reads the results back from the serial console: everything
# between `@@fdprof-vm begin` and `@@fdprof-vm end` lines belongs to one step.

/bin/busybox --install -s
export PATH=/bin:/sbin:/usr/bin:/usr/sbin
umask 022

mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /tmp
mount -t debugfs debugfs /sys/kernel/debug
mount -t tracefs tracefs /sys/kernel/tracing
mount -t bpf bpf /sys/fs/bpf
# Only emergencies on the console from now on: kernel lines must not split a result block.
echo 1 > /proc/sys/kernel/printk
ulimit -n 65536

uptime_s() { cut -d' ' -f1 /proc/uptime; }

echo "@@fdprof-vm init uptime=$(uptime_s) release=$(uname -r)"

# step ID CMD...: runs CMD and prints its stdout, stderr and exit status between markers.
step() {
    id=$1
    shift
    t0=$(uptime_s)
    "$@" >/tmp/step.out 2>/tmp/step.err
    rc=$?
    t1=$(uptime_s)
    echo "@@fdprof-vm begin $id stdout"
    cat /tmp/step.out
    echo
    echo "@@fdprof-vm begin $id stderr"
    cat /tmp/step.err
    echo
    echo "@@fdprof-vm end $id rc=$rc start=$t0 end=$t1"
    return $rc
}

# scenario MODE NAME WORKLOAD-ARGS...: records the workload in MODE, then reports the recording.
scenario() {
    mode=$1
    name=$2
    shift 2
    data=/tmp/$mode-$name.data
    if step "record:$mode:$name" fdprof record --mode "$mode" -o "$data" -- fdprof workload "$@"; then
        step "report:$mode:$name" fdprof report --json "$data"
    fi
}

@STEPS@

echo "@@fdprof-vm done uptime=$(uptime_s)"
sync
poweroff -f
