#!/usr/bin/env bash
# A recipe on real speech, end to end: prepare the corpus, synthesize espeak-ng voices
# saying its training transcripts (where the config mixes them in), pre-train on a
# generic synthetic corpus (where that helps), train configs/CORPUS.yaml, build a 3-gram
# LM from the training transcripts, tune the LM weight and word bonus on dev, evaluate
# greedy and with beam+LM (FSDD: also greedy with inference VTLN, and on single-digit
# recordings), transcribe a clip, draw the plots.
#   scripts/recipe.sh an4|fsdd CORPUS_ROOT [train.key=value ...]
# (scripts/recipe_an4.sh and scripts/recipe_fsdd.sh call this.)
set -euo pipefail
CORPUS="${1:?usage: scripts/recipe.sh an4|fsdd CORPUS_ROOT [train overrides...]}"
CORPUS_ROOT="$(realpath "${2:?usage: scripts/recipe.sh an4|fsdd CORPUS_ROOT [train overrides...]}")"
shift 2
case "$CORPUS" in
    an4)  # train + speaker-disjoint dev; AN4's test part is scored elsewhere
        PREPARE=() SYNTH_HOURS=0 PRETRAIN_HOURS=4 DEV=data/an4/dev.jsonl EVAL=data/an4/dev.jsonl
        SINGLE_DIGITS="" VTLN=""
        # pre-training: SpecAugment on (off when fine-tuning, docs/RECIPES.md AN4 a10), two
        # epochs (a23, a26)
        PRETRAIN=(features.spec_augment.freq_masks=2 features.spec_augment.time_masks=2
                  train.epochs=2) ;;
    fsdd)  # connected digits; speakers disjoint between train, dev (tuning), test (scored)
        PREPARE=(--sequences 3000 --max-digits 7) SYNTH_HOURS=2 PRETRAIN_HOURS=0 PRETRAIN=()
        DEV=data/fsdd/dev.jsonl EVAL=data/fsdd/test.jsonl
        # also scored: the test speaker's recordings as FSDD ships them, one digit each,
        # cut tight around the speech (docs/RECIPES.md, f24)
        SINGLE_DIGITS=data/fsdd-digits
        # also scored: greedy with inference VTLN over warps 0.75-1.25 (the range chosen
        # on the dev speaker; it helps greedy decoding only, docs/RECIPES.md, FSDD "VTLN")
        VTLN="decode.vtln=[0.75,1.25]" ;;
    *) echo "unknown corpus $CORPUS: an4 or fsdd" >&2; exit 2 ;;
esac
source "$(dirname "${BASH_SOURCE[0]}")/venv.sh" ""  # no extras (not the recipe's arguments)
RUN="runs/$CORPUS"
start=$(date +%s)

deepspeech data prepare "$CORPUS" --root "$CORPUS_ROOT" -o "data/$CORPUS" "${PREPARE[@]}"
if [ "$SYNTH_HOURS" != 0 ]; then  # the config mixes these voices in (data.mix)
    deepspeech data synth -o "data/synth-$CORPUS" --hours "$SYNTH_HOURS" --seed 0 \
        --text "data/$CORPUS/train.jsonl" --dev-fraction 0 --test-fraction 0
fi
INIT=()
if [ "$PRETRAIN_HOURS" != 0 ]; then  # generic voices first (docs/RECIPES.md)
    deepspeech data synth -o data/synth-pretrain --hours "$PRETRAIN_HOURS" --seed 0
    # the rate ends the pre-training at half its peak; annealed to 1% it did as well
    # (docs/RECIPES.md, AN4 a6 and a7)
    deepspeech train -c "configs/$CORPUS.yaml" --overwrite "$@" "${PRETRAIN[@]}" \
        train.output_dir="$RUN/pretrain" data.train_manifest=data/synth-pretrain/train.jsonl \
        optim.final_lr_fraction=0.5
    INIT=(train.init_from="$RUN/pretrain/last.pt")
fi
# --overwrite (here and above): running the recipe again replaces its earlier runs
deepspeech train -c "configs/$CORPUS.yaml" --overwrite train.output_dir="$RUN" "${INIT[@]}" "$@"
trained=$(date +%s)
deepspeech lm build --text "data/$CORPUS/train.jsonl" --order 3 -o "$RUN/lm.arpa"
deepspeech decode tune --checkpoint "$RUN/best.pt" --manifest "$DEV" --lm "$RUN/lm.arpa" \
    -o "$RUN/decode.yaml" | tee "$RUN/decode_tune.txt"
deepspeech evaluate --checkpoint "$RUN/best.pt" --manifest "$EVAL" \
    --report "$RUN/eval_greedy.jsonl"
deepspeech evaluate --checkpoint "$RUN/best.pt" --manifest "$EVAL" \
    --report "$RUN/eval_beam.jsonl" --compare "$RUN/eval_greedy.jsonl" \
    --decode-config "$RUN/decode.yaml"
if [ -n "$VTLN" ]; then
    deepspeech evaluate --checkpoint "$RUN/best.pt" --manifest "$EVAL" \
        --report "$RUN/eval_greedy_vtln.jsonl" --compare "$RUN/eval_greedy.jsonl" "$VTLN"
fi
if [ -n "$SINGLE_DIGITS" ]; then
    deepspeech data prepare "$CORPUS" --root "$CORPUS_ROOT" -o "$SINGLE_DIGITS"
    deepspeech evaluate --checkpoint "$RUN/best.pt" --manifest "$SINGLE_DIGITS/test.jsonl" \
        --report "$RUN/eval_digits.jsonl"
fi
clip=$(python -c "from deepspeech.data.manifest import read_manifest; \
print(read_manifest('$EVAL')[0].audio_filepath)")
deepspeech transcribe --checkpoint "$RUN/best.pt" "$clip" --json
deepspeech plot "$RUN"
deepspeech plot "$RUN" --compare "$RUN/wer_minutes.png"  # pre-training minutes included
end=$(date +%s)
echo "recipe done in $(( end - start )) s (up to the end of training: $(( trained - start )) s);" \
     "decode settings: $RUN/decode.yaml, plots: $RUN/*.png"
