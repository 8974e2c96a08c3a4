#!/usr/bin/env bash
# What only a machine with an NVIDIA GPU can check (CI has none), in one go, by part:
#   graphs: the CUDA-graph step's tests, then deepspeech bench train on ds2 in bf16 at batch
#      128 (profiled) and 32, eager and replayed as CUDA graphs; with BASELINE=DIR (an older
#      checkout's deepspeech/ and configs/) that code too, for a before-and-after in one run;
#   train: training on the GPU (0.3 h of synthetic speech): two runs bitwise identical, and
#      identical to a run without the worst batch first; 2 ranks sharing the GPU in
#      deterministic mode bitwise identical to 1 rank;
#   rnn: the persistent GRU kernel's tests, deepspeech bench rnn (the ds2 GRU stack forward
#      and backward: cuDNN eager and graphed against the persistent kernel) and ds2's step
#      with the persistent kernel;
#   ipc: the CUDA IPC all-reduce's tests and bench (2 ranks on the GPU, against the staged ring);
#   features: features computed on the GPU (bench data against the workers, tests, two
#      training runs bitwise identical);
#   more: training in bf16, fp16, on 2 overlapped ranks and eagerly; ds2 trains 20 steps and
#      says how many seconds after its command's start each logged step came;
#   allreduce: the CUDA all-reduce tests (2 ranks sharing GPU 0, against MPI_Allreduce bit
#      for bit) and deepspeech bench allreduce --device cuda (ours against MPI_Allreduce, gloo);
#   bench: the CTC loss on the GPU (our Triton kernels against the CPU kernel) and deepspeech
#      bench train: quickstart and ds2 in fp32, bf16, fp16, eager and as CUDA graphs;
#   english: the general-English recipe's model on the GPU (its variant there: train.device=
#      cuda execution.precision=bf16) in deepspeech bench train, at its batch of 8 and at 64,
#      against the same in fp32 on the GPU.
#   scripts/gpu_checks.sh [OUTPUT_DIR [PART...]]
# OUTPUT_DIR (default runs/gpu) gets the logs; PARTs as listed, all of them by default.
# Runs with the Python on PATH (PYTHON=... to choose) and this checkout on PYTHONPATH.
# WHEELS=DIR: where that Python lacks the project's dependencies (a GPU image with torch,
# Triton and mpi4py but nothing fetchable), a venv that sees its packages gets the wheels
# in DIR first. Every step runs even when an earlier one failed; the summary says which.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY="${PYTHON:-python3}"
OUT="${1:-runs/gpu}"
PARTS=" ${*:2} "
[ "$PARTS" = "  " ] && PARTS=" graphs train rnn ipc features more allreduce bench english "
mkdir -p "$OUT"
if [ -n "${WHEELS:-}" ] && ! "$PY" -c "import soundfile, jiwer" 2>/dev/null; then
    venv=/tmp/deepspeech-gpu-venv
    image_packages=$("$PY" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
    "$PY" -m venv "$venv" || exit 1
    venv_packages=$("$venv/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
    echo "$image_packages" >"$venv_packages/image.pth"
    "$venv/bin/python" -m pip install -q --no-index --no-deps --no-compile "$WHEELS"/*.whl \
        || { echo "installing the wheels of $WHEELS failed"; exit 1; }
    PY="$venv/bin/python"
    export PATH="$venv/bin:$PATH"
fi
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
    tail -n 12 "$OUT/$name.log"
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

corpus="$OUT/synth"
synthesize() {  # the 0.3 h synthetic corpus that training steps read, made once
    [ -f "$corpus/train.jsonl" ] || step synth "$PY" -m deepspeech data synth -o "$corpus" \
        --hours 0.3 --seed 0 --workers 8
}
train=(-c configs/quickstart.yaml data.train_manifest="$corpus/train.jsonl"
       data.val_manifest="$corpus/dev.jsonl" train.device=cuda train.max_steps=40
       train.epochs=1 train.val_limit=32 train.checkpoint_every=1000)
deterministic=(distributed.deterministic=true train.micro_batch_size=4)

if [[ $PARTS == *" graphs "* ]]; then
    step cuda_graph_tests "$PY" -m pytest -q -p no:cacheprovider tests/training/test_cuda_graphs.py \
        tests/model/kernels/test_ctc.py
    ds2=(--device cuda --configs configs/ds2.yaml --seconds 10 --steps 5 --threads "$(nproc)"
         --precision bf16)
    for batch in 128 32; do
        if [ -n "${BASELINE:-}" ]; then
            # from inside it: python -m puts the working directory first on the path
            step "bench_train_ds2_b${batch}_baseline" bash -c 'cd "$0" && exec "$@"' \
                "$BASELINE" "$PY" -m deepspeech bench train "${ds2[@]}" --batch-size "$batch"
        fi
        profile=()
        [ "$batch" = 128 ] && profile=(--profile)
        step "bench_train_ds2_b${batch}_graphs" "$PY" -m deepspeech bench train "${ds2[@]}" \
            --batch-size "$batch" --cuda-graphs "${profile[@]}"
    done
fi
if [[ $PARTS == *" english "* ]]; then
    english=(--device cuda --configs configs/english.yaml --seconds 8 --steps 10
             --threads "$(nproc)")
    for batch in 8 64; do
        for precision in bf16 fp32; do
            step "bench_train_english_b${batch}_${precision}" "$PY" -m deepspeech bench train \
                "${english[@]}" --batch-size "$batch" --precision "$precision"
        done
    done
fi
if [[ $PARTS == *" train "* ]]; then
    synthesize
    step train_run_a "$PY" -m deepspeech train "${train[@]}" train.output_dir="$OUT/run_a"
    step train_run_b "$PY" -m deepspeech train "${train[@]}" train.output_dir="$OUT/run_b"
    step train_same_bits same_weights "$OUT/run_a/last.pt" "$OUT/run_b/last.pt"
    # On a GPU the worst batch runs first (train.worst_batch_first: auto) and leaves no trace.
    step train_no_worst_batch "$PY" -m deepspeech train "${train[@]}" \
        train.worst_batch_first=false train.output_dir="$OUT/run_no_worst"
    step train_worst_batch_no_trace same_weights "$OUT/run_a/last.pt" "$OUT/run_no_worst/last.pt"
    step train_det_1rank "$PY" -m deepspeech train "${train[@]}" "${deterministic[@]}" \
        train.output_dir="$OUT/det_1"
    step train_det_2ranks "${MPIRUN[@]}" "$PY" -m deepspeech train "${train[@]}" \
        "${deterministic[@]}" train.output_dir="$OUT/det_2"
    step train_det_same_bits same_weights "$OUT/det_1/last.pt" "$OUT/det_2/last.pt"
    grep -h "CUDA graph" "$OUT"/train_run_a.log "$OUT"/train_det_2ranks.log | sort | uniq -c \
        | head -n 20
fi
if [[ $PARTS == *" rnn "* ]]; then
    step persistent_gru_tests "$PY" -m pytest -q -p no:cacheprovider \
        tests/model/kernels/test_gru.py tests/bench/test_rnn.py
    step bench_rnn_ds2 "$PY" -m deepspeech bench rnn
    step bench_train_ds2_persistent "$PY" -m deepspeech bench train --device cuda \
        --configs configs/ds2.yaml --seconds 10 --steps 5 --threads "$(nproc)" --precision bf16 \
        --batch-size 128 --cuda-graphs --set execution.rnn_kernel=persistent
    step batch_norm_tests "$PY" -m pytest -q -p no:cacheprovider \
        tests/model/kernels/test_batch_norm.py
    step bench_train_ds2_fused_norm "$PY" -m deepspeech bench train --device cuda \
        --configs configs/ds2.yaml --seconds 10 --steps 5 --threads "$(nproc)" --precision bf16 \
        --batch-size 128 --cuda-graphs --profile --set execution.batch_norm=fused
fi
if [[ $PARTS == *" ipc "* ]]; then
    step cuda_ipc_tests "$PY" -m pytest -q -p no:cacheprovider \
        tests/distributed/test_ipc_mpi.py tests/distributed/test_ipc.py -k cuda
    step bench_allreduce_ipc "${MPIRUN[@]}" "$PY" -m deepspeech bench allreduce --device cuda \
        --sizes 256K,4M,64M --backends ring,ipc --repeats 10 --check-bitwise
fi
if [[ $PARTS == *" features "* ]]; then
    synthesize
    step bench_data_device "$PY" -m deepspeech bench data --manifest "$corpus/train.jsonl" \
        --limit 600 --features linear --workers "$(nproc)" --compute-on device --device cuda
    step device_features_tests "$PY" -m pytest -q -p no:cacheprovider \
        tests/features/test_batch.py tests/training/test_device_features.py
    step train_devfeat_a "$PY" -m deepspeech train "${train[@]}" execution.features_on=device \
        train.output_dir="$OUT/devfeat_a"
    step train_devfeat_b "$PY" -m deepspeech train "${train[@]}" execution.features_on=device \
        train.output_dir="$OUT/devfeat_b"
    step train_devfeat_same_bits same_weights "$OUT/devfeat_a/last.pt" "$OUT/devfeat_b/last.pt"
fi
if [[ $PARTS == *" more "* ]]; then
    synthesize
    step train_bf16 "$PY" -m deepspeech train "${train[@]}" execution.precision=bf16 \
        train.output_dir="$OUT/run_bf16"
    step train_fp16 "$PY" -m deepspeech train "${train[@]}" execution.precision=fp16 \
        train.output_dir="$OUT/run_fp16"
    step train_2ranks_overlapped "${MPIRUN[@]}" "$PY" -m deepspeech train "${train[@]}" \
        train.output_dir="$OUT/ring_2"
    step train_eager "$PY" -m deepspeech train "${train[@]}" execution.cuda_graphs=false \
        train.output_dir="$OUT/run_eager"
    # ds2 on the synthetic corpus: seconds from the command's start to each logged step
    started=$(date +%s.%N)
    step train_ds2 "$PY" -m deepspeech train -c configs/ds2.yaml \
        data.train_manifest="$corpus/train.jsonl" data.val_manifest="$corpus/dev.jsonl" \
        train.max_steps=20 train.log_every=5 train.val_limit=16 train.output_dir="$OUT/ds2"
    step train_ds2_time_to_step "$PY" -c "import json, sys; started = float(sys.argv[1]); \
[print(f\"step {r['step']}: {r['time'] - started:.1f} s after the command started\") \
for r in map(json.loads, open(sys.argv[2])) if 'step' in r and 'time' in r]" \
        "$started" "$OUT/ds2/metrics.jsonl"
fi
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
            --steps 3 --threads "$(nproc)" --precision "$precision" --cuda-graphs
    done
fi

echo
echo "summary ($OUT):"
printf '  %s\n' "${SUMMARY[@]}"
! printf '%s\n' "${SUMMARY[@]}" | grep -q '^FAILED'
