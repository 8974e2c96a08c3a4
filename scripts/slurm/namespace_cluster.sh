# Slurm on the cluster of network namespaces: sourced by scripts/cluster.sh (`up N --slurm`),
# which defines STATE, SUBNET_PREFIX, SELF and the nodes before these functions run.
#
# One munged serves every node through its socket file (a path, reachable from every
# network namespace); slurmctld runs on node1 and one slurmd on each node, each entered
# with `nsenter --net` and its own UTS and mount namespaces: `ip netns exec` remounts /sys,
# which hides the cgroup tree from slurmd. In its mount namespace a daemon sees the node's
# hosts file and its own TmpFS (Slurm's PMIx plugin keeps per-node files there that would
# collide between nodes sharing one /tmp); its jobs inherit both. Everything Slurm writes
# (config, key, sockets, spool, state, logs) lives under $SLURM_DIR, which `down` removes.
# Processes are tracked through /proc (proctrack/linuxproc) and not bound (task/none): no
# cgroups, which namespaces on a shared machine cannot give each node. A node claims
# SLURM_CPUS CPUs (the sbatch scripts' requests fit) whatever the machine has: the nodes
# share its cores.

SLURM_DIR="$STATE/slurm"
SLURM_PACKAGES=(slurmctld slurmd slurm-client munge libpmix-dev)
SLURM_CPUS=32
# the file Slurm's PMIx plugin loads (Debian's libpmix2 lacks it, libpmix-dev has it)
SLURM_PMIX_LIBRARY='/usr/lib/*/pmix2/lib/libpmix.so'

slurm_missing() {  # true where a package this needs is not installed
    local tool
    for tool in slurmctld slurmd sbatch srun munged; do
        command -v "$tool" >/dev/null || return 0
    done
    ! compgen -G "$SLURM_PMIX_LIBRARY" >/dev/null
}

slurm_install() {  # the packages, from the distribution, quietly; or a clear failure
    slurm_missing || return 0
    command -v apt-get >/dev/null || {
        echo "scripts/cluster.sh: --slurm needs ${SLURM_PACKAGES[*]} (no apt-get to install them)" >&2
        return 1; }
    echo "scripts/cluster.sh: installing ${SLURM_PACKAGES[*]} (apt-get)"
    if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
            "${SLURM_PACKAGES[@]}" >"$STATE/apt.log" 2>&1 || slurm_missing; then
        tail -n 5 "$STATE/apt.log" >&2
        echo "scripts/cluster.sh: could not install ${SLURM_PACKAGES[*]}" >&2
        return 1
    fi
}

# Short timeouts: a dead node is noticed in seconds. `sbatch --wait` polls a job at pauses
# that grow up to half of MinJobAge (how long a finished job stays known): 16 s keeps them
# at 8 s; with the default 300 they reach 32 s.
# A requeued job starts again no sooner than cred_expire seconds later (120 by default; 22.05
# refuses 2 and takes 5) and at a pass of the scheduler (sched_interval, 60 by default).
# Partition `urgent` (a higher PriorityTier on the same nodes) preempts jobs of `nodes`:
# they get their --signal warning at once (preempt_send_user_signal), TERM after GraceTime,
# and are requeued.
slurm_conf() {  # slurm_conf COUNT: the cluster's slurm.conf
    local count="$1" k
    cat <<EOF
ClusterName=deepspeech
SlurmctldHost=node1($SUBNET_PREFIX.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$SLURM_DIR/munge/munge.socket,cred_expire=5
StateSaveLocation=$SLURM_DIR/ctld
SlurmctldPidFile=$SLURM_DIR/ctld/slurmctld.pid
SlurmctldLogFile=$SLURM_DIR/ctld/slurmctld.log
SlurmdSpoolDir=$SLURM_DIR/%n/spool
SlurmdPidFile=$SLURM_DIR/%n/slurmd.pid
SlurmdLogFile=$SLURM_DIR/%n/slurmd.log
TmpFS=$SLURM_DIR/tmp
SlurmdParameters=config_overrides
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
SlurmdTimeout=10
MessageTimeout=5
SlurmctldTimeout=10
KillWait=5
MailProg=/bin/true
MinJobAge=16
SchedulerParameters=sched_interval=1,bf_interval=1
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
SlurmctldParameters=preempt_send_user_signal
EOF
    for k in $(seq 1 "$count"); do
        echo "NodeName=node$k NodeAddr=$SUBNET_PREFIX.$k CPUs=$SLURM_CPUS State=UNKNOWN"
    done
    echo "PartitionName=nodes Nodes=node[1-$count] Default=YES MaxTime=INFINITE State=UP GraceTime=30"
    echo "PartitionName=urgent Nodes=node[1-$count] MaxTime=INFINITE State=UP PriorityTier=2"
}

# daemon_on NODE CMD...: CMD in NODE's network namespace with its hostname, hosts file and
# TmpFS (see `node_daemon`, which the new UTS and mount namespaces run).
daemon_on() {
    local node="$1"
    shift
    nsenter --net="/run/netns/$node" unshare --uts --mount --propagation private \
        "$SELF" _node_daemon "$node" "$@"
}

node_daemon() {
    local node="$1"
    shift
    mount --bind "/etc/netns/$node/hosts" /etc/hosts
    mount --bind "$SLURM_DIR/$node/tmp" "$SLURM_DIR/tmp"
    hostname "$node"
    exec "$@"
}

slurm_wait_idle() {  # slurm_wait_idle COUNT: every node idle within 30 s, or fail
    local count="$1" tries idle=0
    for tries in $(seq 300); do
        idle="$( (run_on node1 sinfo -h -N -t idle -o %N) 2>/dev/null | sort -u | wc -l)"
        [ "$idle" -ge "$count" ] && return 0
        sleep 0.1
    done
    echo "scripts/cluster.sh: $idle of $count Slurm nodes idle after 30 s" >&2
    return 1
}

slurm_logs() {  # the daemons' last words, shown before a failed `up` removes them
    local log
    for log in "$SLURM_DIR"/munge/munged.log "$SLURM_DIR"/ctld/slurmctld.log \
            "$SLURM_DIR"/node*/slurmd.log; do
        [ -f "$log" ] && { echo "--- $log:"; tail -n 5 "$log"; }
    done >&2
}

slurm_up() {  # slurm_up COUNT: munged, slurmctld on node1, slurmd on every node
    local count="$1" k
    command -v nsenter >/dev/null || { echo "scripts/cluster.sh: 'nsenter' not found" >&2; return 1; }
    slurm_install
    mkdir -p "$SLURM_DIR/munge" "$SLURM_DIR/ctld" "$SLURM_DIR/tmp"
    for k in $(seq 1 "$count"); do
        mkdir -p "$SLURM_DIR/node$k/spool" "$SLURM_DIR/node$k/tmp"
    done
    chmod 711 "$SLURM_DIR/munge"   # the socket is for every user; the key stays root's
    head -c 1024 /dev/urandom > "$SLURM_DIR/munge/munge.key"
    chmod 400 "$SLURM_DIR/munge/munge.key"
    slurm_conf "$count" > "$SLURM_DIR/slurm.conf"
    slurm_start "$count" || { slurm_logs; return 1; }
}

slurm_start() {  # slurm_start COUNT: the daemons, each of which forks into the background
    local count="$1" k
    munged --force --socket="$SLURM_DIR/munge/munge.socket" \
        --key-file="$SLURM_DIR/munge/munge.key" --pid-file="$SLURM_DIR/munge/munged.pid" \
        --log-file="$SLURM_DIR/munge/munged.log" --seed-file="$SLURM_DIR/munge/munged.seed" ||
        return
    # node1's TmpFS is slurmctld's too; it writes nothing there
    daemon_on node1 slurmctld -f "$SLURM_DIR/slurm.conf" || return
    for k in $(seq 1 "$count"); do
        daemon_on "node$k" slurmd -f "$SLURM_DIR/slurm.conf" -N "node$k" || return
    done
    slurm_wait_idle "$count"
}

slurmd_again() {  # slurmd_again NODE: the node's slurmd, as after a reboot
    [ -f "$SLURM_DIR/slurm.conf" ] && ip netns list | grep -qx "$1\( .*\)\?" || {
        echo "scripts/cluster.sh: no Slurm node '$1' (is the cluster up with --slurm?)" >&2
        return 1; }
    daemon_on "$1" slurmd -f "$SLURM_DIR/slurm.conf" -N "$1"
}

slurm_down() {  # the daemons of the nodes die with their namespaces; munged is the host's
    local pid
    pid="$(cat "$SLURM_DIR/munge/munged.pid" 2>/dev/null)" || return 0
    # the pid file outlives a munged that died: kill only a munged
    [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = munged ] && kill -KILL "$pid" || true
}
