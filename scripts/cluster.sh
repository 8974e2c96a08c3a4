#!/usr/bin/env bash
# A cluster of N nodes on one machine, for running and testing multi-node jobs.
#
# Usage: scripts/cluster.sh up N [RATE] [--slurm]
#                                          make nodes node1..nodeN; RATE (e.g. 1gbit, 10gbit)
#                                          shapes each node's link with tbf; --slurm also
#                                          starts Slurm: controller on node1, slurmd on each
#        scripts/cluster.sh mpirun ARGS...  run mpirun from node1, e.g.
#            scripts/cluster.sh mpirun --host node1:2,node2:2 -n 4 deepspeech train -c ...
#        scripts/cluster.sh run HOST CMD... run CMD on node HOST (its network, its hostname;
#                                           with Slurm up: sbatch, srun, squeue, scontrol)
#        scripts/cluster.sh slurmd HOST     start HOST's slurmd again (after it was killed, as
#                                           a node that dies and comes back)
#        scripts/cluster.sh down            remove everything `up` made, processes left on the
#                                           nodes included (safe to repeat)
#
# A node is a network namespace with its own hostname (a UTS namespace, made by
# `unshare --uts` each time a process enters the node), one veth link to a bridge on
# the private subnet 10.77.0.0/24 (nodeK is 10.77.0.K), and its own /etc/hosts that
# names the nodes (ip netns exec mounts /etc/netns/nodeK/hosts over it; the host's
# /etc/hosts is never touched). The bridge has no address: the nodes reach each other
# and nothing else. Processes of all nodes share the machine's files, cores and memory.
#
# Open MPI 5 starts its daemon (prted) on another node as on a real cluster, through an
# ssh-like launch agent: PRTE_MCA_plm_ssh_agent is this script's `agent` command, which
# gets `HOST CMD...` and runs CMD in HOST's namespace with HOST's hostname. MPI's TCP
# traffic and the runtime's own are confined to the subnet (btl_tcp_if_include,
# oob_tcp_if_include), and ranks on different nodes see different hostnames, so
# Split_type(COMM_TYPE_SHARED) and the node-aware all-reduce see real nodes.
#
# --slurm: scripts/slurm/namespace_cluster.sh (it installs Debian's Slurm and munge where
# missing); commands run on a node find the cluster's slurm.conf through SLURM_CONF.
# Needs root, `ip` (iproute2), `unshare` and `nsenter` (util-linux) and `tc` for RATE.
set -euo pipefail

SELF="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")"
SUBNET_PREFIX="10.77.0"
SUBNET="$SUBNET_PREFIX.0/24"
BRIDGE="dsclbr0"
STATE="/run/deepspeech-cluster"   # the node names made, one a line: what `down` removes
# shellcheck source=slurm/namespace_cluster.sh
source "$(dirname "$SELF")/slurm/namespace_cluster.sh"

usage() {
    sed -n '4,15p' "$SELF" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

# --- down -------------------------------------------------------------------------------

down() {
    slurm_down
    if [ -f "$STATE/nodes" ]; then
        local node
        while read -r node; do
            [ -n "$node" ] || continue
            # a process left on a node (a rank whose launcher was killed) would keep its
            # namespace alive, unreachable, after the name is gone
            ip netns pids "$node" 2>/dev/null | xargs -r kill -KILL 2>/dev/null || true
            ip netns del "$node" 2>/dev/null || true   # also removes the node's end of its veth
            ip link del "dscl-$node" 2>/dev/null || true
            rm -rf "/etc/netns/$node"
        done < "$STATE/nodes"
    fi
    ip link del "$BRIDGE" 2>/dev/null || true
    rmdir /etc/netns 2>/dev/null || true             # only if we left it empty
    rm -rf "$STATE"
}

# --- up ---------------------------------------------------------------------------------

# tbf's bucket must hold what the rate sends between two timer ticks; 10 ms of traffic
# (at least 64 KiB) keeps shaped TCP at the rate from 100 Mbit/s to 10 Gbit/s.
burst_bytes() {
    local rate="$1" number unit scale
    if ! [[ "$rate" =~ ^([0-9]+)([kmg]?)bit$ ]]; then
        echo "scripts/cluster.sh: RATE must look like 100mbit, 1gbit or 10gbit, not '$rate'" >&2
        return 2
    fi
    number="${BASH_REMATCH[1]}" unit="${BASH_REMATCH[2]}"
    case "$unit" in k) scale=1000 ;; m) scale=1000000 ;; g) scale=1000000000 ;; *) scale=1 ;; esac
    local bytes=$(( number * scale / 8 / 100 ))
    echo $(( bytes > 65536 ? bytes : 65536 ))
}

shape() {  # shape DEVICE RATE [NETNS]: tbf on DEVICE's egress
    local device="$1" rate="$2" burst
    burst="$(burst_bytes "$rate")"
    ${3:+ip netns exec "$3"} tc qdisc replace dev "$device" root tbf rate "$rate" \
        burst "$burst" latency 50ms
}

hosts_file() {  # the /etc/hosts every node sees
    local count="$1" k
    printf '127.0.0.1 localhost\n'
    for k in $(seq 1 "$count"); do
        printf '%s.%d node%d\n' "$SUBNET_PREFIX" "$k" "$k"
    done
}

make_node() {  # make_node K COUNT [RATE]
    local k="$1" count="$2" rate="${3:-}" node="node$1"
    echo "$node" >> "$STATE/nodes"   # recorded first: `down` removes it even if the rest fails
    ip netns add "$node"
    mkdir -p "/etc/netns/$node"
    hosts_file "$count" > "/etc/netns/$node/hosts"
    ip link add "dscl-$node" type veth peer name "dscl-$node-in"
    ip link set "dscl-$node-in" netns "$node"
    ip -n "$node" link set "dscl-$node-in" name eth0
    ip -n "$node" addr add "$SUBNET_PREFIX.$k/24" dev eth0
    ip -n "$node" link set lo up
    ip -n "$node" link set eth0 up
    ip link set "dscl-$node" master "$BRIDGE" up
    if [ -n "$rate" ]; then
        shape "dscl-$node" "$rate"            # into the node
        shape eth0 "$rate" "$node"            # out of it
    fi
}

wait_link_up() {  # wait_link_up NODE: its link reports carrier within 5 s, or fail
    local tries
    for tries in $(seq 50); do
        ip -n "$1" -o link show eth0 | grep -q 'state UP' && return 0
        sleep 0.1
    done
    echo "scripts/cluster.sh: $1's link did not come up" >&2
    return 1
}

up() {
    local slurm="" positional=() arg
    for arg in "$@"; do
        if [ "$arg" = --slurm ]; then slurm=1; else positional+=("$arg"); fi
    done
    local count="${positional[0]:-}" rate="${positional[1]:-}"
    [ "${#positional[@]}" -le 2 ] || usage
    [[ "$count" =~ ^[1-9][0-9]*$ ]] && [ "$count" -le 250 ] || usage
    [ -z "$rate" ] || burst_bytes "$rate" >/dev/null
    [ "$(id -u)" = 0 ] || { echo "scripts/cluster.sh: needs root (network namespaces)" >&2; exit 1; }
    local tool
    for tool in ip unshare ${rate:+tc}; do
        command -v "$tool" >/dev/null || { echo "scripts/cluster.sh: '$tool' not found" >&2; exit 1; }
    done
    if [ -e "$STATE" ] || ip link show "$BRIDGE" >/dev/null 2>&1; then
        echo "scripts/cluster.sh: a cluster is already up; run 'scripts/cluster.sh down' first" >&2
        exit 1
    fi
    trap 'status=$?; trap - EXIT INT TERM; down; exit $(( status ? status : 130 ))' INT TERM
    trap 'status=$?; trap - EXIT; [ "$status" = 0 ] || down' EXIT
    mkdir -p "$STATE"
    : > "$STATE/nodes"
    ip link add "$BRIDGE" type bridge
    ip link set "$BRIDGE" up
    local k
    for k in $(seq 1 "$count"); do
        make_node "$k" "$count" "$rate"
    done
    for k in $(seq 1 "$count"); do  # every link is up before anyone relies on it
        wait_link_up "node$k"
    done
    [ -z "$slurm" ] || slurm_up "$count"
    trap - EXIT INT TERM
    echo "cluster up: node1..node$count on $SUBNET${rate:+, links shaped to $rate}${slurm:+, Slurm (partition 'nodes'; 'urgent' preempts it)}"
}

# --- entering a node --------------------------------------------------------------------

# In a fresh UTS namespace (see run_on): take the node's hostname, then become CMD.
enter() {
    hostname "$1"
    shift
    exec "$@"
}

run_on() {  # run_on HOST CMD...: CMD in HOST's network namespace, with HOST's hostname
    local host="$1"
    shift
    ip netns list | grep -qx "$host\( .*\)\?" || {
        echo "scripts/cluster.sh: no node '$host' (is the cluster up?)" >&2; exit 1; }
    [ ! -f "$SLURM_DIR/slurm.conf" ] || export SLURM_CONF="$SLURM_DIR/slurm.conf"
    exec ip netns exec "$host" unshare --uts "$SELF" _enter "$host" "$@"
}

# ssh's calling convention: the words after HOST are one shell command line. Like an ssh
# client, the agent stays on the calling node and outlives a remote command that is killed,
# exiting 255 then: mpirun reads a node whose processes all died as a lost daemon (an agent
# that died with them would read as a daemon that exited with status 0, ending the job
# with status 0).
agent() {
    local host="$1" status=0
    shift
    ( run_on "$host" bash -c "$*" ) || status=$?
    exit $(( status > 128 ? 255 : status ))
}

cluster_mpirun() {
    export PRTE_MCA_plm_ssh_agent="$SELF agent"
    export OMPI_MCA_btl_tcp_if_include="$SUBNET" PRTE_MCA_oob_tcp_if_include="$SUBNET"
    # Namespaces need root anyway; on a real cluster this runs as a user.
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    run_on node1 mpirun "$@"
}

case "${1:-}" in
    up) shift; up "$@" ;;
    down) down ;;
    mpirun) shift; cluster_mpirun "$@" ;;
    run) shift; [ $# -ge 2 ] || usage; run_on "$@" ;;
    slurmd) shift; [ $# = 1 ] || usage; slurmd_again "$1" ;;
    agent) shift; [ $# -ge 2 ] || usage; agent "$@" ;;
    _enter) shift; enter "$@" ;;
    _node_daemon) shift; node_daemon "$@" ;;
    *) usage ;;
esac
