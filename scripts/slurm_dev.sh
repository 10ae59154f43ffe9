#!/usr/bin/env bash
# A throw-away, single-host Slurm for tests and CI: one slurmctld and NODES
# emulated compute nodes (one `slurmd -N nX` each, on its own port), each with
# fake GPUs, in partition `debug`, and a munged of its own. Everything lives
# under one directory, by default /tmp/zeus-slurm-ID where ID is derived from
# this checkout's path, with ports derived from it too: two checkouts on one
# host run two clusters side by side (own directory, ports, munge socket and
# key). `stop` removes it.
#
#   scripts/slurm_dev.sh start [NODES]   install if missing (root + apt-get), start, wait until idle
#   scripts/slurm_dev.sh stop            cancel jobs, stop the daemons, remove the directory
#   scripts/slurm_dev.sh status          daemons, nodes and queue; exit 0 when the cluster answers
#   scripts/slurm_dev.sh conf            print this cluster's slurm.conf path
#
# Client commands need the config: `export SLURM_CONF=$(scripts/slurm_dev.sh conf)`.
# The tests use a cluster only when it is named: `export ZEUS_SLURM_CONF=$(scripts/slurm_dev.sh conf)`
# (.ci/run starts one and does this).
#
# Settings (environment):
#   ZEUS_SLURM_DIR        config, state, logs, munge, fake devices (default /tmp/zeus-slurm-ID)
#   ZEUS_SLURM_PORT       slurmctld port; node i listens on PORT+i (default derived from the directory)
#   ZEUS_SLURM_CPUS       CPUs per emulated node (default 4; more than the host has is fine)
#   ZEUS_SLURM_GPUS       fake GPUs per emulated node (default 1)
#   ZEUS_SLURM_MIN_JOB_AGE  seconds a finished job stays visible to squeue -t all / scontrol (default 30)
#
# Exit codes: 0 done, 1 failed (the message says why and where the logs are), 2 usage.
#
# Jobs run as the submitting user (root included: DisableRootJobs is off), with
# the submitter's environment and --chdir; the filesystem is trivially shared.
# Without accounting there is no sacct: read job states with squeue/scontrol.
set -euo pipefail

CHECKOUT=$(cd "$(dirname "$0")/.." && pwd -P)
ID=$(printf '%s' "$CHECKOUT" | cksum | cut -d' ' -f1)
DIR=${ZEUS_SLURM_DIR:-/tmp/zeus-slurm-$ID}
DIR_ID=$(printf '%s' "$DIR" | cksum | cut -d' ' -f1)
# 400 slots of 80 ports from 20000: slurmctld on the first, node i on PORT+i (at most 64 nodes).
PORT=${ZEUS_SLURM_PORT:-$((20000 + (DIR_ID % 400) * 80))}
CPUS=${ZEUS_SLURM_CPUS:-4}
GPUS=${ZEUS_SLURM_GPUS:-1}
MIN_JOB_AGE=${ZEUS_SLURM_MIN_JOB_AGE:-30}
CONF=$DIR/etc/slurm.conf
MUNGE=$DIR/munge
MUNGE_SOCKET=$MUNGE/munge.socket
export SLURM_CONF=$CONF

say() { echo "slurm_dev: $*" >&2; }
die() {
    say "error: $*"
    exit 1
}
usage() {
    sed -n '10,13p' "$0" | sed 's/^# *//' >&2
    exit 2
}

elapsed() { # since EPOCHREALTIME value -> seconds with one decimal
    awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }'
}

is_int() { [[ $1 =~ ^[0-9]+$ ]]; }

alive() { # pid -> running (a zombie that nobody reaps counts as gone)
    local st
    st=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1) || return 1
    [[ -n $st && $st != Z ]]
}

pid_alive() { # pidfile
    [[ -s $1 ]] && alive "$(cat "$1")"
}

node_names() { # N -> n1 n2 ...
    local i
    for ((i = 1; i <= $1; i++)); do echo "n$i"; done
}

configured_nodes() {
    [[ -f $DIR/nodes ]] && cat "$DIR/nodes" || echo 0
}

install_if_missing() {
    local missing=()
    for bin in slurmctld slurmd sinfo munged; do
        command -v "$bin" >/dev/null 2>&1 || [[ -x /usr/sbin/$bin ]] || missing+=("$bin")
    done
    ((${#missing[@]} == 0)) && return 0
    [[ $(id -u) == 0 ]] || die "Slurm is not installed (missing: ${missing[*]}) and installing needs root. Run as root, or: apt-get install slurmctld slurmd slurm-client munge"
    command -v apt-get >/dev/null || die "Slurm is not installed (missing: ${missing[*]}) and there is no apt-get here; install slurmctld, slurmd, slurm-client and munge by hand"
    say "installing slurmctld slurmd slurm-client munge (apt-get)"
    export DEBIAN_FRONTEND=noninteractive
    local log=$DIR/apt.log
    if ! { apt-get update -qq && apt-get install -y -qq slurmctld slurmd slurm-client munge; } >"$log" 2>&1; then
        tail -n 5 "$log" >&2
        die "apt-get failed; see $log"
    fi
    rm -f "$log"
}

munge_ok() { munge -S "$MUNGE_SOCKET" -n 2>/dev/null | unmunge -S "$MUNGE_SOCKET" >/dev/null 2>&1; }

start_munge() { # this cluster's own munged: own key, socket, pid, log and seed under $MUNGE
    munge_ok && return 0
    mkdir -p "$MUNGE"
    if [[ ! -s $MUNGE/munge.key ]]; then
        dd if=/dev/urandom of="$MUNGE/munge.key" bs=1024 count=1 status=none || die "cannot write $MUNGE/munge.key"
    fi
    chmod 700 "$MUNGE"
    chmod 600 "$MUNGE/munge.key"
    local user=root
    id munge >/dev/null 2>&1 && user=munge
    chown -R "$user:" "$MUNGE"
    runuser -u "$user" -- /usr/sbin/munged --force --socket="$MUNGE_SOCKET" --key-file="$MUNGE/munge.key" \
        --pid-file="$MUNGE/munged.pid" --log-file="$MUNGE/munged.log" --seed-file="$MUNGE/munged.seed" ||
        die "munged did not start; see $MUNGE/munged.log"
    local i
    for ((i = 0; i < 50; i++)); do
        munge_ok && return 0
        sleep 0.1
    done
    die "munged runs but munge -n | unmunge fails on $MUNGE_SOCKET; see $MUNGE/munged.log"
}

write_config() { # N
    local n=$1 host i
    host=$(hostname -s)
    mkdir -p "$DIR"/{etc,state,spool,log,run,dev}
    for ((i = 0; i < GPUS; i++)); do
        [[ -e $DIR/dev/nvidia$i ]] || mknod "$DIR/dev/nvidia$i" c 195 "$i" || die "mknod $DIR/dev/nvidia$i failed"
    done
    local gres=""
    ((GPUS > 0)) && gres="Gres=gpu:$GPUS"
    {
        cat <<EOF
# Generated by scripts/slurm_dev.sh: a throw-away single-host test cluster.
ClusterName=zeus-dev-$DIR_ID
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$MUNGE_SOCKET
CredType=cred/munge
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool/%n
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd-%n.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
MailProg=/bin/true
# No systemd and no cgroups here.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
# No accounting (the Debian build has no slurmdbd here): squeue/scontrol only.
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
SchedulerType=sched/builtin
SchedulerParameters=sched_interval=1
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
GresTypes=gpu
ReturnToService=2
# Short timeouts so tests are quick.
MinJobAge=$MIN_JOB_AGE
# Job ids of their own: tests' fake Slurm numbers its jobs from 100 and finds a job's processes by
# SLURM_JOB_ID, so this cluster's ids start far from there (and from other clusters' ids).
FirstJobId=$((1000000 + (DIR_ID % 5000) * 10000))
KillWait=3
OverTimeLimit=0
InactiveLimit=0
Waittime=0
MessageTimeout=10
SlurmdTimeout=30
SlurmctldTimeout=30
EOF
        for ((i = 1; i <= n; i++)); do
            echo "NodeName=n$i NodeHostname=$host NodeAddr=127.0.0.1 Port=$((PORT + i)) CPUs=$CPUS $gres State=UNKNOWN"
        done
        echo "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP"
    } >"$CONF"
    if ((GPUS > 0)); then
        echo "# Fake GPUs: character devices 195,N (the NVIDIA major) that nothing opens." >"$DIR/etc/gres.conf"
        echo "Name=gpu File=$DIR/dev/nvidia[0-$((GPUS - 1))]" >>"$DIR/etc/gres.conf"
    else
        : >"$DIR/etc/gres.conf"
    fi
    echo "$n" >"$DIR/nodes"
}

nodes_idle() { # N -> 0 when all N nodes report idle (or mixed/allocated: they are up)
    local states
    states=$(timeout 10 sinfo -h -N -o '%N %t' 2>/dev/null) || return 1
    local up
    up=$(awk '$2 ~ /^(idle|mix|alloc|comp)$/' <<<"$states" | sort -u | wc -l)
    ((up == $1))
}

wait_idle() { # N seconds
    local n=$1 limit=$2 t0=$SECONDS
    while ((SECONDS - t0 < limit)); do
        nodes_idle "$n" && return 0
        sleep 0.2
    done
    return 1
}

log_tail() {
    local f
    for f in "$DIR"/log/*.log; do
        [[ -f $f ]] || continue
        echo "--- $f (last 5 lines)" >&2
        tail -n 5 "$f" >&2
    done
}

daemons_running() { # slurmctld is up
    pid_alive "$DIR/run/slurmctld.pid"
}

all_running() { # slurmctld and every configured slurmd are up
    local n node
    n=$(configured_nodes)
    ((n > 0)) && daemons_running || return 1
    for node in $(node_names "$n"); do
        pid_alive "$DIR/run/slurmd-$node.pid" || return 1
    done
}

cmd_start() {
    local n=${1:-2}
    if ! is_int "$n" || ((n < 1 || n > 64)); then
        say "NODES must be a whole number from 1 to 64, got '$n'"
        exit 2
    fi
    if ! is_int "$GPUS" || ! is_int "$CPUS" || ((CPUS < 1)) || ! is_int "$PORT" || ! is_int "$MIN_JOB_AGE"; then
        say "ZEUS_SLURM_GPUS, ZEUS_SLURM_PORT and ZEUS_SLURM_MIN_JOB_AGE must be whole numbers, ZEUS_SLURM_CPUS at least 1"
        exit 2
    fi
    if all_running && [[ $(configured_nodes) == "$n" ]] && wait_idle "$n" 10; then
        say "already running with $n nodes (SLURM_CONF=$CONF)"
        return 0
    fi
    if [[ -d $DIR/run ]]; then
        say "restarting: the cluster under $DIR is not complete, not answering or not $n nodes"
        stop_daemons
    fi
    local t0=$EPOCHREALTIME
    mkdir -p "$DIR"
    install_if_missing
    # Start from a clean state (this cluster's munged and its key are kept).
    rm -rf "${DIR:?}"/{etc,state,spool,log,run,dev,nodes}
    mkdir -p "$DIR/run"
    port_free "$PORT" || die "port $PORT is in use (another program, or a cluster with the same port); set ZEUS_SLURM_PORT"
    start_munge
    write_config "$n"
    /usr/sbin/slurmctld -c -f "$CONF" || {
        log_tail
        die "slurmctld did not start (log: $DIR/log/slurmctld.log)"
    }
    local node
    for node in $(node_names "$n"); do
        mkdir -p "$DIR/spool/$node"
        /usr/sbin/slurmd -f "$CONF" -N "$node" || {
            log_tail
            die "slurmd -N $node did not start (log: $DIR/log/slurmd-$node.log)"
        }
    done
    if ! wait_idle "$n" 60; then
        sinfo -N >&2 || true
        log_tail
        die "the $n nodes did not become idle within 60 s (logs: $DIR/log/)"
    fi
    if ! all_running; then
        log_tail
        die "a Slurm daemon exited after starting (a port in use? logs: $DIR/log/)"
    fi
    say "up: $n nodes idle in partition debug after $(elapsed "$t0") s"
    say "use it with: export SLURM_CONF=$CONF (tests: export ZEUS_SLURM_CONF=$CONF)"
}

port_free() { # port -> 0 when nothing listens on it (bash's /dev/tcp)
    ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

stop_pids() { # name pid... : SIGTERM all at once, SIGKILL what is left after 5 s
    local name=$1 pid i left
    shift
    (($# > 0)) || return 0
    kill -TERM "$@" 2>/dev/null || true
    for ((i = 0; i < 50; i++)); do
        left=()
        for pid in "$@"; do alive "$pid" && left+=("$pid"); done
        ((${#left[@]} == 0)) && return 0
        sleep 0.1
    done
    say "$name (pid ${left[*]}) ignored SIGTERM for 5 s; sending SIGKILL"
    kill -KILL "${left[@]}" 2>/dev/null || true
}

live_pids() { # pidfile... -> the live pids they name
    local f
    for f in "$@"; do
        pid_alive "$f" && cat "$f"
    done
    return 0
}

our_stepds() { # slurmstepd processes started by our slurmds (they inherit SLURM_CONF=$CONF)
    local p
    for p in /proc/[0-9]*; do
        [[ $(cat "$p/comm" 2>/dev/null) == slurmstepd ]] || continue
        alive "${p#/proc/}" || continue
        tr '\0' '\n' 2>/dev/null <"$p/environ" | grep -qx "SLURM_CONF=$CONF" && echo "${p#/proc/}"
    done
    return 0
}

stop_daemons() { # cancel jobs, stop slurmctld, the slurmds and what is left of their jobs
    if daemons_running; then
        # Cancel jobs first so their processes are ended by Slurm itself.
        local jobs
        jobs=$(timeout 10 squeue -h -o %i 2>/dev/null || true)
        # shellcheck disable=SC2086
        [[ -n $jobs ]] && { timeout 10 scancel $jobs 2>/dev/null || true; }
        local i
        for ((i = 0; i < 50; i++)); do
            [[ -z $(timeout 5 squeue -h -o %i 2>/dev/null) ]] && break
            sleep 0.1
        done
    fi
    # shellcheck disable=SC2046
    stop_pids "slurm daemons" $(live_pids "$DIR"/run/slurmd-*.pid "$DIR/run/slurmctld.pid")
    local pids
    pids=$(our_stepds)
    if [[ -n $pids ]]; then
        say "killing leftover slurmstepd: $pids"
        # shellcheck disable=SC2086
        kill -KILL $pids 2>/dev/null || true
    fi
}

cmd_stop() {
    if [[ ! -d $DIR ]]; then
        say "not running (no $DIR)"
        return 0
    fi
    stop_daemons
    # shellcheck disable=SC2046
    stop_pids munged $(live_pids "$MUNGE/munged.pid")
    rm -rf "${DIR:?}"
    say "stopped and removed $DIR"
}

cmd_status() {
    if ! daemons_running; then
        say "not running (no live slurmctld under $DIR)"
        exit 1
    fi
    echo "SLURM_CONF=$CONF"
    local f
    for f in "$DIR"/run/*.pid; do
        [[ -e $f ]] || continue
        local name
        name=$(basename "$f" .pid)
        if pid_alive "$f"; then echo "$name: pid $(cat "$f")"; else echo "$name: DEAD"; fi
    done
    timeout 10 sinfo -N -o '%N %P %t %c %G' || die "slurmctld is running but sinfo fails; see $DIR/log/slurmctld.log"
    timeout 10 squeue -o '%i %j %T %N %M %l' || true
}

case ${1:-} in
start)
    (($# <= 2)) || usage
    cmd_start "${2:-2}"
    ;;
stop)
    (($# == 1)) || usage
    cmd_stop
    ;;
status)
    (($# == 1)) || usage
    cmd_status
    ;;
conf)
    (($# == 1)) || usage
    echo "$CONF"
    ;;
*) usage ;;
esac
