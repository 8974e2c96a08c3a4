#!/usr/bin/env bash
# The all-reduce measured over a network: `deepspeech bench allreduce` on a cluster of
# network namespaces (scripts/cluster.sh), the figures of docs/BENCHMARKS.md, "Across nodes".
#
# Usage: scripts/bench_cluster.sh OUT_DIR [RATE...]
#   RATE: unshaped (the default: unshaped and 1gbit), or a tbf rate such as 1gbit, 10gbit.
#   For each RATE: 2 nodes x 1 rank and 2 nodes x 2 ranks, 1M, 16M and 64M, backends ring,
#   hierarchical, auto, mpi (MPI_Allreduce) and gloo, with the Sendrecv ceiling; then the
#   MPI_Allreduce gap: without coll/han, with each of coll/tuned's algorithms forced, with
#   yielding ranks; then --tune on 2 x 2 (OUT_DIR/RATE-2x2-rules.json) and auto following
#   those rules. One table per run in OUT_DIR/RATE-LAYOUT[-VARIANT].txt.
#   PARTS="matrix gap tune" (the default) runs those three parts, or fewer.
# Run it on an otherwise idle machine (it says the load before each run); needs root.
set -euo pipefail

[ $# -ge 1 ] || { sed -n '5,12p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
OUT="$1"
shift
RATES=("$@")
[ ${#RATES[@]} -gt 0 ] || RATES=(unshaped 1gbit)
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CLUSTER="$HERE/cluster.sh"
REPEATS="${REPEATS:-5}"
PARTS="${PARTS:-matrix gap tune}"
for part in $PARTS; do
    case "$part" in matrix|gap|tune) ;; *) echo "PARTS: unknown part '$part'" >&2; exit 2 ;; esac
done
export OMPI_MCA_btl="${OMPI_MCA_btl:-^ofi}" OMPI_MCA_osc="${OMPI_MCA_osc:-^ucx}"
mkdir -p "$OUT"

bench() {  # bench NAME HOSTS RANKS [VARIABLE=VALUE...] -- BENCH_ARGS...
    local name="$1" hosts="$2" ranks="$3" settings=() exported=()
    shift 3
    while [ "$1" != "--" ]; do
        settings+=("$1")
        # Open MPI hands OMPI_MCA_* settings of mpirun's environment to every rank; others
        # travel with -x, as on a real cluster
        [[ "$1" == OMPI_MCA_* ]] || exported+=(-x "${1%%=*}")
        shift
    done
    shift
    echo "== $name: load $(cut -d' ' -f1-3 /proc/loadavg) ${settings[*]}" | tee "$OUT/$name.txt"
    env "${settings[@]}" "$CLUSTER" mpirun --host "$hosts" -n "$ranks" "${exported[@]}" \
        python -m deepspeech bench allreduce "$@" 2>&1 | grep -v '^ *$' | tee -a "$OUT/$name.txt"
}

matrix() {  # matrix RATE: every backend on 2 x 1 and 2 x 2
    local rate="$1"
    for layout in "2x1 node1:1,node2:1 2" "2x2 node1:2,node2:2 4"; do
        read -r tag hosts ranks <<< "$layout"
        bench "$rate-$tag" "$hosts" "$ranks" -- --sizes 1M,16M,64M --repeats "$REPEATS" \
            --backends ring,hierarchical,auto,mpi,gloo
    done
}

gap() {  # gap RATE: where MPI_Allreduce's time goes
    local rate="$1"
    # The MPI_Allreduce gap, 2 x 2 at 64M: Open MPI 5 runs coll/han (node-aware) on
    # communicators that span nodes; without it coll/tuned decides, or runs the algorithm
    # forced here (ompi_info --param coll tuned --level 9); and yielding ranks.
    bench "$rate-2x2-mpi-han-off" node1:2,node2:2 4 "OMPI_MCA_coll=^han" -- \
        --sizes 1M,16M,64M --repeats 3 --backends mpi
    for algorithm in 1 2 3 4 5 6; do  # basic linear, nonoverlapping (reduce + bcast),
        # recursive doubling, ring, segmented ring, Rabenseifner
        bench "$rate-2x2-mpi-han-off-algorithm$algorithm" node1:2,node2:2 4 \
            "OMPI_MCA_coll=^han" OMPI_MCA_coll_tuned_use_dynamic_rules=1 \
            OMPI_MCA_coll_tuned_allreduce_algorithm="$algorithm" -- \
            --sizes 64M --repeats 2 --backends mpi
    done
    bench "$rate-2x2-mpi-yield" node1:2,node2:2 4 OMPI_MCA_mpi_yield_when_idle=1 -- \
        --sizes 1M,64M --repeats 2 --backends mpi
    # han pipelines its three phases in 64 KiB segments (coll_han_allreduce_segsize)
    bench "$rate-2x2-mpi-han-segments-4M" node1:2,node2:2 4 \
        OMPI_MCA_coll_han_allreduce_segsize=4194304 -- --sizes 1M,16M,64M --repeats 3 \
        --backends mpi
    bench "$rate-2x1-mpi-han-off" node1:1,node2:1 2 "OMPI_MCA_coll=^han" -- \
        --sizes 1M,16M,64M --repeats 3 --backends mpi
}

tune() {  # tune RATE: rules for 2 x 2 on this link (--tune), and auto following them
    local rate="$1"
    bench "$rate-2x2-tune" node1:2,node2:2 4 -- --sizes 1M,4M,16M,64M --repeats 3 \
        --backends rd,ring-only@256K,ring-only@1M,ring-only@4M,hierarchical \
        --tune "$OUT/$rate-2x2-rules.json"
    bench "$rate-2x2-tuned" node1:2,node2:2 4 \
        DEEPSPEECH_ALLREDUCE_TUNING="$OUT/$rate-2x2-rules.json" -- \
        --sizes 1M,16M,64M --repeats "$REPEATS" --backends ring,hierarchical,auto
}

trap '"$CLUSTER" down' EXIT
for rate in "${RATES[@]}"; do
    "$CLUSTER" up 2 ${rate/#unshaped/}
    for part in $PARTS; do
        "$part" "$rate"
    done
    "$CLUSTER" down
done
