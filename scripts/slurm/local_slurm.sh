#!/usr/bin/env bash
# A real single-node SLURM on this machine, for testing the Snakemake SLURM profile end to end.
#
#   eval "$(scripts/slurm/local_slurm.sh up)"   # install (Debian packages) if needed, start, export SLURM_CONF
#   scripts/slurm/local_slurm.sh status         # daemons, nodes, partitions, jobs
#   scripts/slurm/local_slurm.sh down           # cancel this cluster's jobs, stop only the daemons it started
#
# Why it looks like this: there is no systemd here, so munged, slurmctld and slurmd are started directly and
# their PIDs kept in the state directory (each daemon's pid file, listed in <state>/pids); `down` signals
# exactly those PIDs (after checking each still runs the expected program) and nothing else. Everything (config, munge key and socket, spool, logs) lives in one state
# directory. Clients find the config through SLURM_CONF, and also through a symlink /etc/slurm/slurm.conf ->
# <state>/etc/slurm.conf that `up` creates (only where no slurm.conf exists) and `down` removes (only if it is
# still that link): the Snakemake SLURM plugin runs `srun` inside each job with every SLURM_* variable
# stripped, SLURM_CONF included, so the job step needs the default path. A machine that already has a
# /etc/slurm/slurm.conf has its own SLURM: use that one instead. The node advertises fake GPUs (gres
# gpu:fake:N, one by default) so GPU rules, multi-GPU ones included, can be scheduled on a machine without any.
# Needs root (slurmd runs jobs as their owner) and apt-get for the install.
#
# Environment:
#   PREFPIPE_SLURM_DIR       state directory (default /tmp/prefpipe-slurm); must be traversable by user munge
#   PREFPIPE_SLURM_PORT      slurmctld port (default 6817); slurmd uses PORT+1
#   PREFPIPE_SLURM_INSTALL   1 (default): apt-get install missing packages; 0: fail instead
#   PREFPIPE_SLURM_MEM_MB    node RealMemory in MB (default: half of MemTotal)
#   PREFPIPE_SLURM_GPUS      fake GPUs on the node (default 1; 0 = none)
set -euo pipefail

STATE_DIR="${PREFPIPE_SLURM_DIR:-/tmp/prefpipe-slurm}"
PORT="${PREFPIPE_SLURM_PORT:-6817}"
INSTALL="${PREFPIPE_SLURM_INSTALL:-1}"
GPUS="${PREFPIPE_SLURM_GPUS:-1}"
PACKAGES=(slurmctld slurmd slurm-client munge)
CONF="$STATE_DIR/etc/slurm.conf"
ETC_CONF=/etc/slurm/slurm.conf
PIDS="$STATE_DIR/pids"
# Programs we start, in start order; `down` stops them in reverse.
DAEMONS=(munged slurmctld slurmd)

STARTING=0  # set while `up` runs: a failure then stops whatever it had started

log() { echo "[local_slurm] $*" >&2; }
die() {
    log "ERROR: $*"
    if [[ $STARTING == 1 ]]; then
        STARTING=0
        cmd_down
    fi
    exit 1
}

pid_file() {
    case "$1" in
        munged) echo "$STATE_DIR/munge/munged.pid" ;;
        slurmctld) echo "$STATE_DIR/run/slurmctld.pid" ;;
        slurmd) echo "$STATE_DIR/run/slurmd.pid" ;;
    esac
}

# The PID from a daemon's pid file, printed only if that process is alive and runs the expected program.
live_pid() {
    local name="$1" file pid
    file="$(pid_file "$name")"
    [[ -s "$file" ]] || return 1
    pid="$(tr -dc '0-9' <"$file")"
    [[ -n "$pid" && -d "/proc/$pid" ]] || return 1
    # comm is the name the program was started as (Debian's /usr/sbin/slurmctld links to slurmctld-wlm).
    [[ "$(cat "/proc/$pid/comm" 2>/dev/null)" == "$name" ]] || return 1
    echo "$pid"
}

ensure_packages() {
    local missing=()
    for p in "${PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    [[ ${#missing[@]} -eq 0 ]] && return 0
    [[ "$INSTALL" == "1" ]] || die "missing Debian packages: ${missing[*]} (set PREFPIPE_SLURM_INSTALL=1 to install)"
    command -v apt-get >/dev/null || die "missing Debian packages ${missing[*]} and no apt-get to install them"
    log "installing ${missing[*]} with apt-get"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >&2
    apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
}

port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

write_config() {
    local node hw mem_mb
    node="$(hostname -s)"
    # slurmd -C reports this machine's real topology (CPUs, sockets, cores, threads); keep it except memory.
    hw="$(slurmd -C | head -n1 | tr ' ' '\n' | grep -E '^(CPUs|Boards|SocketsPerBoard|CoresPerSocket|ThreadsPerCore)=' | tr '\n' ' ')"
    mem_mb="${PREFPIPE_SLURM_MEM_MB:-$(($(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 / 2))}"
    [[ "$GPUS" =~ ^[0-9]+$ ]] || die "PREFPIPE_SLURM_GPUS=$GPUS: not a whole number"
    local node_gres="" gres_line="# no GPUs (PREFPIPE_SLURM_GPUS=0)"
    if ((GPUS == 1)); then
        node_gres=" Gres=gpu:fake:1"
        gres_line="NodeName=${node} Name=gpu Type=fake File=/dev/null"
    elif ((GPUS > 1)); then
        # slurmd counts one GPU per device file (Count= alone reports 0 GPUs and drains the node; regular files
        # are rejected as "not a valid character or block device"): one null device (char 1,3, like /dev/null)
        # per fake GPU, numbered so SLURM derives each device index (CUDA_VISIBLE_DEVICES) from its name.
        rm -rf "$STATE_DIR/dev"
        mkdir -p "$STATE_DIR/dev"
        for ((i = 0; i < GPUS; i++)); do
            mknod -m 0666 "$STATE_DIR/dev/fakegpu$i" c 1 3 ||
                die "mknod $STATE_DIR/dev/fakegpu$i failed (PREFPIPE_SLURM_GPUS > 1 needs device files)"
        done
        node_gres=" Gres=gpu:fake:${GPUS}"
        gres_line="NodeName=${node} Name=gpu Type=fake File=${STATE_DIR}/dev/fakegpu[0-$((GPUS - 1))]"
    fi
    mkdir -p "$STATE_DIR/etc" "$STATE_DIR/state" "$STATE_DIR/spool" "$STATE_DIR/log" "$STATE_DIR/run"
    cat >"$CONF" <<EOF
# Generated by scripts/slurm/local_slurm.sh: one node in three partitions: 'cpu' (default) and 'gpu' as in
# profiles/slurm, and a high-priority 'urgent' whose jobs preempt (requeue) the others.
ClusterName=prefpipe
SlurmctldHost=${node}(127.0.0.1)
SlurmctldPort=${PORT}
SlurmdPort=$((PORT + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=${STATE_DIR}/munge/munge.socket
StateSaveLocation=${STATE_DIR}/state
SlurmdSpoolDir=${STATE_DIR}/spool/slurmd-%n
SlurmctldPidFile=$(pid_file slurmctld)
SlurmdPidFile=$(pid_file slurmd)
SlurmctldLogFile=${STATE_DIR}/log/slurmctld.log
SlurmdLogFile=${STATE_DIR}/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
# No cgroups and no systemd in containers: track processes by parent PID, no task binding.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
GresTypes=gpu
# No accounting daemon: sacct cannot work, so the Snakemake profile polls with squeue, and squeue only
# remembers finished jobs for MinJobAge seconds (the plugin wants >= 3x its first status-check delay).
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
# Memory is enforced without cgroups: slurmstepd samples /proc every second and kills a step that uses more
# than the job's --mem ("exceeded memory limit" in the job log), so a too-small mem_mb fails as on a cluster.
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=task=1
JobAcctGatherParams=OverMemoryKill
MinJobAge=600
# Jobs are NOT requeueable unless submitted with --requeue (the profile's slurm-requeue: true), so a test
# of preemption shows that the profile, not a cluster default, keeps preempted work alive.
JobRequeue=0
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
ReturnToService=2
InactiveLimit=0
KillWait=5
SlurmdTimeout=60
NodeName=${node} NodeAddr=127.0.0.1 ${hw}RealMemory=${mem_mb}${node_gres} State=UNKNOWN
PartitionName=cpu Nodes=${node} Default=YES MaxTime=INFINITE State=UP PriorityTier=1
PartitionName=gpu Nodes=${node} MaxTime=INFINITE State=UP PriorityTier=1
PartitionName=urgent Nodes=${node} MaxTime=INFINITE State=UP PriorityTier=10
EOF
    cat >"$STATE_DIR/etc/gres.conf" <<EOF
# Fake GPUs: schedulable, CUDA_VISIBLE_DEVICES is set for jobs, but there is no device behind them.
AutoDetect=off
${gres_line}
EOF
}

start_munge() {
    local d="$STATE_DIR/munge"
    mkdir -p "$d"
    [[ -s "$d/munge.key" ]] || dd if=/dev/urandom of="$d/munge.key" bs=1024 count=1 status=none
    # munged refuses a socket directory others cannot traverse and a key others can read.
    chmod 0755 "$STATE_DIR" "$d"
    chmod 0600 "$d/munge.key"
    chown -R munge:munge "$d"
    runuser -u munge -- /usr/sbin/munged --socket="$d/munge.socket" --key-file="$d/munge.key" \
        --pid-file="$(pid_file munged)" --log-file="$d/munged.log" --seed-file="$d/munged.seed"
}

wait_for() {
    local what="$1" seconds="$2" check="$3"
    for _ in $(seq $((seconds * 5))); do
        if eval "$check" >/dev/null 2>&1; then return 0; fi
        sleep 0.2
    done
    die "$what did not come up within ${seconds}s; see $STATE_DIR/log and $STATE_DIR/munge/munged.log"
}

cmd_up() {
    [[ "$(id -u)" == "0" ]] || die "must run as root (slurmd starts jobs as their owner)"
    if live_pid slurmctld >/dev/null || live_pid slurmd >/dev/null || live_pid munged >/dev/null; then
        die "a cluster from $STATE_DIR is already running; run '$0 down' first"
    fi
    ensure_packages
    STARTING=1
    for p in "$PORT" $((PORT + 1)); do
        port_busy "$p" && die "port $p is in use (another SLURM?); set PREFPIPE_SLURM_PORT"
    done
    # Ours from an earlier run, or a dangling link left by a run whose state directory is gone: replace it.
    if [[ -e "$ETC_CONF" ]] && [[ "$(readlink "$ETC_CONF" || true)" != "$CONF" ]]; then
        die "$ETC_CONF exists and is not ours: this machine has its own SLURM configuration; use that cluster"
    fi
    mkdir -p "$STATE_DIR"
    write_config
    mkdir -p "$(dirname "$ETC_CONF")"
    ln -sfn "$CONF" "$ETC_CONF"
    export SLURM_CONF="$CONF"
    : >"$PIDS"

    start_munge
    wait_for munged 10 "live_pid munged"
    echo "munged $(live_pid munged)" >>"$PIDS"

    # -c: start from a clean state (no jobs or node state from an earlier run of this directory).
    /usr/sbin/slurmctld -c -f "$CONF"
    wait_for slurmctld 20 "live_pid slurmctld && scontrol ping | grep -q UP"
    echo "slurmctld $(live_pid slurmctld)" >>"$PIDS"

    /usr/sbin/slurmd -f "$CONF"
    wait_for slurmd 20 "live_pid slurmd"
    echo "slurmd $(live_pid slurmd)" >>"$PIDS"
    wait_for "node ${HOSTNAME%%.*}" 30 "sinfo -h -N -o %t | grep -qE '^(idle|mix|alloc)'"

    STARTING=0
    log "up: $(tr '\n' ' ' <"$PIDS")(state in $STATE_DIR)"
    echo "export SLURM_CONF=$CONF"
}

stop_pid() {
    local name="$1" pid="$2"
    kill -TERM "$pid" 2>/dev/null || return 0
    for _ in $(seq 50); do
        [[ -d "/proc/$pid" ]] || return 0
        sleep 0.2
    done
    log "$name ($pid) ignored SIGTERM for 10s; sending SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
}

cmd_down() {
    export SLURM_CONF="$CONF"
    if live_pid slurmctld >/dev/null; then
        # Only this cluster's jobs: squeue talks to our slurmctld through SLURM_CONF.
        local jobs
        jobs="$(squeue -h -t PENDING,RUNNING,SUSPENDED,REQUEUED -o %i 2>/dev/null | tr '\n' ' ' || true)"
        if [[ -n "${jobs// /}" ]]; then
            log "cancelling jobs: $jobs"
            # shellcheck disable=SC2086
            scancel $jobs || true
            for _ in $(seq 50); do
                [[ -z "$(squeue -h -t RUNNING,COMPLETING -o %i 2>/dev/null)" ]] && break
                sleep 0.2
            done
        fi
    fi
    local stopped=()
    for ((i = ${#DAEMONS[@]} - 1; i >= 0; i--)); do
        local name="${DAEMONS[$i]}" pid
        if pid="$(live_pid "$name")"; then
            stop_pid "$name" "$pid"
            stopped+=("$name:$pid")
        fi
    done
    rm -f "$PIDS"
    if [[ -L "$ETC_CONF" && "$(readlink "$ETC_CONF")" == "$CONF" ]]; then
        rm -f "$ETC_CONF"
    fi
    log "down: stopped ${stopped[*]:-nothing} (logs kept in $STATE_DIR/log)"
}

cmd_status() {
    export SLURM_CONF="$CONF"
    local any=0
    for name in "${DAEMONS[@]}"; do
        if pid="$(live_pid "$name")"; then echo "$name running (pid $pid)"; any=1; else echo "$name stopped"; fi
    done
    if [[ $any == 1 ]] && live_pid slurmctld >/dev/null; then
        sinfo -o '%P %a %D %t %G %c %m'
        squeue -t all -o '%i %P %j %T %M %b %k'
    fi
}

case "${1:-}" in
    up) cmd_up ;;
    down) cmd_down ;;
    status) cmd_status ;;
    env) echo "export SLURM_CONF=$CONF" ;;
    *) echo "usage: $0 up|down|status|env" >&2; exit 2 ;;
esac
