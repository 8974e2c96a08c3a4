#!/usr/bin/env bash
# The general-English recipe (configs/english.yaml), end to end on 2 CPU cores:
#   scripts/recipe_english.sh ../shared/data/speechocean762 [../shared/data/an4
#       [../shared/data/librispeech_mini]] [train.key=value ...]
# 1. prepare speechocean762 (speaker-disjoint dev, children and adults), AN4 and LibriSpeech
#    (any of its parts; Mini LibriSpeech's dev speakers carved out) when given;
# 2. general-English text from Debian and PyPI packages (scripts/english_lm_text.py);
# 3. pre-train on synthetic voices saying that text (espeak-ng, and flite, festival and
#    Piper where installed), then train on the real speakers;
# 4. a 3-gram LM of the general text plus the training transcripts, its weight and word
#    bonus tuned on the dev speakers;
# 5. score dev greedy and with the LM, by age group and gender, and LibriSpeech's dev;
# 6. export the model package with its LM and transcribe a dev sentence through `deepspeech
#    serve` (a speaker and a sentence the model never heard).
# The voices: Piper comes with the recipe's environment (pyproject's `voices` extra, locked
# in scripts/lock/voices.txt; x86_64 only); flite and festival are Debian's (`apt-get
# install flite festival festvox-kallpc16k festvox-kdlpc16k festvox-us-slt-hts`), skipped
# with a warning where missing.
# Choices and their measured effect: docs/RECIPES.md ("General English").
set -euo pipefail
USAGE="usage: scripts/recipe_english.sh SPEECHOCEAN762_ROOT [AN4_ROOT [LIBRISPEECH_ROOT]] [train.key=value ...]"
SO762_ROOT="$(realpath "${1:?$USAGE}")"
shift
AN4_ROOT=""
LIBRI_ROOT=""
if [ $# -gt 0 ] && [[ "$1" != *=* ]]; then
    AN4_ROOT="$(realpath "$1")"
    shift
fi
if [ $# -gt 0 ] && [[ "$1" != *=* ]]; then
    LIBRI_ROOT="$(realpath "$1")"
    shift
fi
source "$(dirname "${BASH_SOURCE[0]}")/venv.sh" voices  # Piper's voice, locked
RUN=runs/english
start=$(date +%s)

deepspeech data prepare speechocean762 --root "$SO762_ROOT" -o data/so762
MIX_ITEMS=()
TRANSCRIPTS=(data/so762/train.jsonl)
if [ -n "$AN4_ROOT" ]; then  # 67 more speakers of American English
    deepspeech data prepare an4 --root "$AN4_ROOT" -o data/an4
    TRANSCRIPTS+=(data/an4/train.jsonl)
    MIX_ITEMS+=("{manifest: data/an4/train.jsonl, weight: 1.0}")
fi
if [ -n "$LIBRI_ROOT" ]; then  # read books: native speakers, long sentences, everyday words
    deepspeech data prepare librispeech --root "$LIBRI_ROOT" -o data/librispeech
    for part in data/librispeech/train-*.jsonl; do
        TRANSCRIPTS+=("$part")
        MIX_ITEMS+=("{manifest: $part, weight: 1.0}")
    done
fi
MIX="data.mix=[$(IFS=,; echo "${MIX_ITEMS[*]}")]"
python "$(dirname "${BASH_SOURCE[0]}")/english_lm_text.py" data/english-text

deepspeech data synth -o data/synth-english --hours 3 --seed 0 \
    --engines espeak,flite,festival,piper \
    --text data/english-text/sentences.txt --dev-fraction 0 --test-fraction 0
# pre-training: the rate ends at half its peak, as the AN4 recipe's (docs/RECIPES.md, AN4 a7)
deepspeech train -c configs/english.yaml --overwrite "$@" \
    train.output_dir="$RUN/pretrain" data.train_manifest=data/synth-english/train.jsonl \
    "data.mix=[]" train.epochs=2 optim.final_lr_fraction=0.5
# --overwrite (here and above): running the recipe again replaces its earlier runs
deepspeech train -c configs/english.yaml --overwrite train.output_dir="$RUN" \
    train.init_from="$RUN/pretrain/last.pt" "$MIX" "$@"
trained=$(date +%s)

deepspeech lm build --text data/english-text/general_en.txt "${TRANSCRIPTS[@]}" --order 3 \
    --prune -o "$RUN/lm.arpa"
deepspeech decode tune --checkpoint "$RUN/best.pt" --manifest data/so762/dev.jsonl \
    --lm "$RUN/lm.arpa" -o "$RUN/decode.yaml" | tee "$RUN/decode_tune.txt"
deepspeech evaluate --checkpoint "$RUN/best.pt" --manifest data/so762/dev.jsonl \
    --report "$RUN/eval_greedy.jsonl" --group-by age_group --group-by gender
deepspeech evaluate --checkpoint "$RUN/best.pt" --manifest data/so762/dev.jsonl \
    --report "$RUN/eval_beam.jsonl" --compare "$RUN/eval_greedy.jsonl" \
    --decode-config "$RUN/decode.yaml" --group-by age_group --group-by gender
if [ -n "$LIBRI_ROOT" ]; then  # native speakers reading books, never heard
    # dev.jsonl where dev speakers were carved out (Mini LibriSpeech), else dev-clean.jsonl ...
    for dev in data/librispeech/dev*.jsonl; do
        name="librispeech_$(basename "$dev" .jsonl)"
        deepspeech evaluate --checkpoint "$RUN/best.pt" --manifest "$dev" \
            --report "$RUN/eval_${name}_greedy.jsonl" --group-by gender
        deepspeech evaluate --checkpoint "$RUN/best.pt" --manifest "$dev" \
            --report "$RUN/eval_${name}_beam.jsonl" --decode-config "$RUN/decode.yaml" \
            --compare "$RUN/eval_${name}_greedy.jsonl" --group-by gender
    done
fi

rm -rf "$RUN/package"
deepspeech export --checkpoint "$RUN/best.pt" --format package -o "$RUN/package" \
    --lm "$RUN/lm.arpa" --decode-config "$RUN/decode.yaml"
# a dev utterance with a word that no training transcript has: only the LM's text knows it
IFS=$'\t' read -r clip reference < <(python - "${TRANSCRIPTS[@]}" <<'PY'
import sys
from deepspeech.data.manifest import read_manifest
heard = {word for path in sys.argv[1:] for entry in read_manifest(path)
         for word in entry.text.lower().split()}
dev = read_manifest("data/so762/dev.jsonl")
unseen = next((e for e in dev if set(e.text.lower().split()) - heard), dev[0])
print(f"{unseen.audio_filepath}\t{unseen.text}")
PY
)
port=$(python -c "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
deepspeech serve --checkpoint "$RUN/package" --port "$port" > "$RUN/serve.log" 2>&1 &
server=$!
trap 'kill "$server" 2>/dev/null || true' EXIT
for _ in $(seq 120); do
    curl -sf "http://127.0.0.1:$port/health" > /dev/null && break
    kill -0 "$server" 2>/dev/null || { cat "$RUN/serve.log" >&2; exit 1; }
    sleep 0.5
done
echo "served $clip (said: $reference):"
curl -sf -F "audio=@$clip" "http://127.0.0.1:$port/transcribe" | tee "$RUN/served.json"
echo
kill "$server"
deepspeech plot "$RUN"
deepspeech plot "$RUN" --compare "$RUN/wer_minutes.png"  # pre-training minutes included
end=$(date +%s)
echo "recipe done in $(( end - start )) s (up to the end of training: $(( trained - start )) s);" \
     "package: $RUN/package, decode settings: $RUN/decode.yaml, plots: $RUN/*.png"
