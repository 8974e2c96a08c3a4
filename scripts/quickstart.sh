#!/usr/bin/env bash
# README command 1: create .venv, install, then the main job end to end:
# synthesize the offline corpus, train configs/quickstart.yaml, evaluate on the
# held-out voices (greedy, then beam search with a 3-gram LM of the training
# transcripts, as Deep Speech 2 decodes), transcribe one test clip, draw the plots.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/venv.sh" ""  # no extras (not this script's arguments)
# What the job needs, each checked by using it; a broken piece stops here with what to do.
deepspeech doctor || { echo "quickstart: fix the problem(s) above, then run it again" >&2; exit 1; }
HOURS="${HOURS:-4}"
RUN=runs/quickstart
start=$(date +%s)

deepspeech data synth -o data/synth --hours "$HOURS" --seed 0
deepspeech data stats data/synth/train.jsonl data/synth/test.jsonl
# --overwrite: running the job again replaces its earlier run
deepspeech train -c configs/quickstart.yaml --overwrite train.output_dir="$RUN" "$@"
deepspeech evaluate --checkpoint "$RUN/best.pt" --manifest data/synth/test.jsonl \
    --report "$RUN/test_report.jsonl"
deepspeech lm build --text data/synth/train.jsonl --order 3 -o "$RUN/lm.arpa"
# LM weight and word bonus as `deepspeech decode tune` chose them on data/synth/dev.jsonl
# (docs/RECIPES.md, "Quickstart decoding"); tuning inside the job would cost a minute.
deepspeech evaluate --checkpoint "$RUN/best.pt" --manifest data/synth/test.jsonl \
    --report "$RUN/test_report_beam.jsonl" --compare "$RUN/test_report.jsonl" \
    decode.mode=beam decode.lm="$RUN/lm.arpa" decode.lm_weight=1.5 decode.word_bonus=-1 \
    decode.beam=50
clip=$(python -c "from deepspeech.data.manifest import read_manifest; \
print(read_manifest('data/synth/test.jsonl')[0].audio_filepath)")
deepspeech transcribe --checkpoint "$RUN/best.pt" "$clip" --json
deepspeech plot "$RUN"
echo "done in $(( $(date +%s) - start )) s; plots: $RUN/*.png, metrics: $RUN/metrics.jsonl"
