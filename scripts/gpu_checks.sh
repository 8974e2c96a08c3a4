#!/usr/bin/env bash
# What only a machine with an NVIDIA GPU can check (CI has none), in one go:
#   1. the CUDA all-reduce tests (2 ranks sharing GPU 0, against MPI_Allreduce bit for bit);
#   2. deepspeech bench allreduce --device cuda (2 ranks; ours against MPI_Allreduce and gloo);
#   3. the CTC loss on the GPU (deepspeech bench ctc: our Triton kernels against the CPU
#      kernel) and deepspeech bench train on the GPU: quickstart and ds2 in fp32, bf16, fp16;
#   4. the GPU CTC tests, then training on the GPU: two runs bitwise identical, and identical
#      to a run without the worst batch first; then 2 ranks sharing the GPU in deterministic
#      mode bitwise identical to 1 rank.
#   scripts/gpu_checks.sh [OUTPUT_DIR [PART...]]
# OUTPUT_DIR (default runs/gpu) gets the logs; PARTs: allreduce (1-2), bench (3), train (4),
# all three by default.
# Runs with the Python on PATH (PYTHON=... to choose) and this checkout on PYTHONPATH;
# every step runs even when an earlier one failed, and the summary says which failed.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY="${PYTHON:-python3}"
OUT="${1:-runs/gpu}"
PARTS=" ${*:2} "
[ "$PARTS" = "  " ] && PARTS=" allreduce bench train "
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" OMPI_MCA_btl='^ofi' PYTHONUNBUFFERED=1
MPIRUN=(mpirun -n 2)
[ "$(id -u)" = 0 ] && MPIRUN+=(--allow-run-as-root)
declare -a SUMMARY=()

step() {  # step NAME COMMAND...: run, keep the log, note pass or fail
    local name="$1"; shift
    local start=$SECONDS
    echo "== $name: $*"
    if "$@" >"$OUT/$name.log" 2>&1; then
        SUMMARY+=("ok     $name ($((SECONDS - start)) s)")
    else
        SUMMARY+=("FAILED $name ($((SECONDS - start)) s): see $OUT/$name.log")
    fi
    tail -n 25 "$OUT/$name.log"
}

digest() {  # digest CHECKPOINT: SHA-256 of the model weights
    "$PY" -c "import sys; from deepspeech.training.checkpoint import load_checkpoint; \
from deepspeech.training.determinism import state_dict_digest; \
print(state_dict_digest(load_checkpoint(sys.argv[1]).model))" "$1"
}

same_weights() {  # same_weights A.pt B.pt
    local a b
    a=$(digest "$1") && b=$(digest "$2") || return 1
    echo "$1: $a"; echo "$2: $b"
    [ "$a" = "$b" ]
}

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
"$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, \
'cudnn', torch.backends.cudnn.version())"

if [[ $PARTS == *" allreduce "* ]]; then
    step cuda_allreduce_tests "$PY" -m pytest -q -p no:cacheprovider \
        tests/distributed/test_allreduce_mpi.py -k cuda
    step bench_allreduce "${MPIRUN[@]}" "$PY" -m deepspeech bench allreduce --device cuda \
        --sizes 4K-256M --backends ring,mpi,gloo --repeats 10
fi
if [[ $PARTS == *" bench "* ]]; then
    step bench_ctc "$PY" -m deepspeech bench ctc --threads "$(nproc)"
    for precision in fp32 bf16 fp16; do
        # all the cores, as the first GPU session (then the CTC loss ran on the CPU)
        step "bench_train_$precision" "$PY" -m deepspeech bench train --device cuda \
            --configs configs/quickstart.yaml configs/ds2.yaml --batch-size 128 --seconds 10 \
            --steps 3 --threads "$(nproc)" --precision "$precision"
    done
    step bench_train_ds2_bf16_profile "$PY" -m deepspeech bench train --device cuda \
        --configs configs/ds2.yaml --batch-size 128 --seconds 10 --steps 3 --threads "$(nproc)" \
        --precision bf16 --profile
fi
if [[ $PARTS == *" train "* ]]; then
    step cuda_ctc_tests "$PY" -m pytest -q -p no:cacheprovider tests/model/test_gpu_ctc.py
    corpus="$OUT/synth"
    step synth "$PY" -m deepspeech data synth -o "$corpus" --hours 0.3 --seed 0 --workers 8
    train=(-c configs/quickstart.yaml data.train_manifest="$corpus/train.jsonl"
           data.val_manifest="$corpus/dev.jsonl" train.device=cuda train.max_steps=40
           train.epochs=1 train.val_limit=32 train.checkpoint_every=1000)
    step train_run_a "$PY" -m deepspeech train "${train[@]}" train.output_dir="$OUT/run_a"
    step train_run_b "$PY" -m deepspeech train "${train[@]}" train.output_dir="$OUT/run_b"
    step train_same_bits same_weights "$OUT/run_a/last.pt" "$OUT/run_b/last.pt"
    # On a GPU the worst batch runs first (train.worst_batch_first: auto) and leaves no trace.
    step train_no_worst_batch "$PY" -m deepspeech train "${train[@]}" \
        train.worst_batch_first=false train.output_dir="$OUT/run_no_worst"
    step train_worst_batch_no_trace same_weights "$OUT/run_a/last.pt" "$OUT/run_no_worst/last.pt"
    step train_bf16 "$PY" -m deepspeech train "${train[@]}" train.precision=bf16 \
        train.output_dir="$OUT/run_bf16"
    step train_fp16 "$PY" -m deepspeech train "${train[@]}" train.precision=fp16 \
        train.output_dir="$OUT/run_fp16"
    deterministic=(distributed.deterministic=true train.micro_batch_size=4)
    step train_det_1rank "$PY" -m deepspeech train "${train[@]}" "${deterministic[@]}" \
        train.output_dir="$OUT/det_1"
    step train_det_2ranks "${MPIRUN[@]}" "$PY" -m deepspeech train "${train[@]}" \
        "${deterministic[@]}" train.output_dir="$OUT/det_2"
    step train_det_same_bits same_weights "$OUT/det_1/last.pt" "$OUT/det_2/last.pt"
    step train_2ranks_overlapped "${MPIRUN[@]}" "$PY" -m deepspeech train "${train[@]}" \
        train.output_dir="$OUT/ring_2"
fi

echo
echo "summary ($OUT):"
printf '  %s\n' "${SUMMARY[@]}"
! printf '%s\n' "${SUMMARY[@]}" | grep -q '^FAILED'
