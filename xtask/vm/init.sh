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
# Loopback, for the daemon's HTTP server.
ifconfig lo 127.0.0.1 up

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

# recorded MODE DATA WORKLOAD-ARGS...: starts the workload held before its measured phase
# (--wait-signal), attaches `fdprof record -p` to it, then lets it go, so the recording covers
# exactly what the workload's `expected` describes. Prints the workload's result JSON.
recorded() {
    mode=$1
    data=$2
    shift 2
    # A previous scenario's files would answer the readiness checks below too early.
    rm -f /tmp/w.out /tmp/w.err /tmp/r.err
    fdprof workload "$@" --wait-signal >/tmp/w.out 2>/tmp/w.err &
    wpid=$!
    n=0
    until grep -q '"ready"' /tmp/w.out 2>/dev/null; do
        n=$((n + 1))
        if [ $n -gt 600 ] || ! kill -0 $wpid 2>/dev/null; then
            echo "workload never became ready" >&2
            cat /tmp/w.err >&2
            kill $wpid 2>/dev/null
            return 1
        fi
        sleep 0.1
    done
    # shellcheck disable=SC2086 # $extra: none, or --trace
    fdprof record --mode "$mode" $extra -p $wpid -o "$data" 2>/tmp/r.err &
    rpid=$!
    until grep -q '^fdprof: attached' /tmp/r.err 2>/dev/null; do
        if ! kill -0 $rpid 2>/dev/null; then
            cat /tmp/r.err >&2
            kill $wpid 2>/dev/null
            return 1
        fi
        sleep 0.1
    done
    kill -USR1 $wpid
    wait $wpid
    wrc=$?
    wait $rpid
    rrc=$?
    tail -n 1 /tmp/w.out
    cat /tmp/w.err /tmp/r.err >&2
    [ $wrc -eq 0 ] && [ $rrc -eq 0 ]
}

# scenario MODE NAME WORKLOAD-ARGS...: records the workload in MODE, then reports the recording.
scenario() {
    mode=$1
    name=$2
    shift 2
    data=/tmp/$mode-$name.data
    if step "record:$mode:$name" recorded "$mode" "$data" "$@"; then
        step "report:$mode:$name" fdprof report --json "$data"
    fi
}

# traced MODE NAME WORKLOAD-ARGS...: records the workload with --trace, then replays the trace
# under the allocator of the guest's kernel.
traced() {
    mode=$1
    name=$2
    shift 2
    data=/tmp/$mode-$name.data
    extra=--trace
    ok=0
    step "record:$mode:$name" recorded "$mode" "$data" "$@" || ok=1
    extra=
    if [ $ok -eq 0 ]; then
        step "replay:$mode:$name" fdprof replay --model mainline --json "$data"
    fi
}

# launched MODE NAME WORKLOAD-ARGS...: launches the workload under `record --trace` (its
# inherited close-on-exec fds go through its exec), then replays the trace.
launched() {
    mode=$1
    name=$2
    shift 2
    data=/tmp/$mode-$name.data
    if step "record:$mode:$name" fdprof record --mode "$mode" --trace -o "$data" -- \
        fdprof workload "$@"; then
        step "replay:$mode:$name" fdprof replay --model mainline --json "$data"
    fi
}

# unwound MODE: the chain program (static, built without frame pointers) launched under
# `record --cpu`; prints the report's stacks (with their wait counts), a marker line, then the
# on-CPU samples as folded stacks (with their sample counts).
unwound() {
    mode=$1
    data=/tmp/$mode-chain.data
    fdprof record --mode "$mode" --lock-only --cpu --freq 499 -o "$data" -- /bin/chain 3 \
        >/dev/null || return 1
    fdprof report --json --top 200 "$data" || return 1
    echo "@@folded"
    fdprof flamegraph --cpu --folded -o - "$data"
}

# watched MODE WORKLOAD-ARGS...: `fdprof top --jsonl` launching the workload: its JSON line,
# then one line per interval.
watched() {
    mode=$1
    shift
    fdprof top --mode "$mode" --jsonl --interval 500ms -- fdprof workload "$@"
}

# served MODE NAME WORKLOAD-ARGS...: `fdprof daemon --tier full` following the processes named
# NAME. The workload runs under that name (a copy of fdprof), held before its measured phase
# until the daemon says it follows it; two intervals after it ends /metrics is read with the
# daemon's token. Prints the workload's JSON line, then the metrics.
served() {
    mode=$1
    name=$2
    shift 2
    cp /bin/fdprof "/tmp/$name"
    head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >/tmp/token
    echo >>/tmp/token
    chmod 0400 /tmp/token
    rm -f /tmp/d.err /tmp/w.out /tmp/w.err
    fdprof daemon --mode "$mode" --tier full --comm "$name" --interval 500ms \
        --listen 127.0.0.1:9464 --token-file /tmp/token 2>/tmp/d.err &
    dpid=$!
    "/tmp/$name" workload "$@" --wait-signal >/tmp/w.out 2>/tmp/w.err &
    wpid=$!
    n=0
    until grep -q "profiling pid $wpid " /tmp/d.err 2>/dev/null; do
        n=$((n + 1))
        if [ $n -gt 600 ] || ! kill -0 $dpid 2>/dev/null; then
            echo "the daemon never followed the workload" >&2
            cat /tmp/d.err /tmp/w.err >&2
            kill $dpid $wpid 2>/dev/null
            return 1
        fi
        sleep 0.1
    done
    kill -USR1 $wpid
    wait $wpid
    wrc=$?
    tail -n 1 /tmp/w.out
    sleep 2
    wget -q -O - --header "Authorization: Bearer $(cat /tmp/token)" \
        http://127.0.0.1:9464/metrics
    rc=$?
    kill $dpid
    wait $dpid
    drc=$?
    cat /tmp/w.err /tmp/d.err >&2
    [ $wrc -eq 0 ] && [ $rc -eq 0 ] && [ $drc -eq 0 ]
}

extra=
@STEPS@

echo "@@fdprof-vm done uptime=$(uptime_s)"
sync
poweroff -f
