# Sourced by scripts/recipe_<corpus>.sh after it sets CORPUS, CORPUS_ROOT, PREPARE
# (extra `data prepare` arguments), DEV and EVAL (manifests, relative to the repo):
# prepare the corpus, synthesize espeak-ng voices saying its training transcripts,
# train configs/$CORPUS.yaml, build a 3-gram LM from the training transcripts, tune the
# LM weight and word bonus on DEV, evaluate EVAL greedy and with beam+LM, transcribe a
# clip, draw the plots. Arguments are train overrides (train.epochs=3 ...).
source "$(dirname "${BASH_SOURCE[0]}")/venv.sh" ""  # no extras (not the recipe's arguments)
RUN="runs/$CORPUS"
start=$(date +%s)

# shellcheck disable=SC2086  # PREPARE holds several arguments
deepspeech data prepare "$CORPUS" --root "$CORPUS_ROOT" -o "data/$CORPUS" $PREPARE
deepspeech data synth -o "data/synth-$CORPUS" --hours "$SYNTH_HOURS" --seed 0 \
    --text "data/$CORPUS/train.jsonl" --dev-fraction 0 --test-fraction 0
deepspeech train -c "configs/$CORPUS.yaml" train.output_dir="$RUN" "$@"
trained=$(date +%s)
deepspeech lm build --text "data/$CORPUS/train.jsonl" --order 3 -o "$RUN/lm.arpa"
tuned=$(deepspeech decode tune --checkpoint "$RUN/best.pt" --manifest "$DEV" \
    --lm "$RUN/lm.arpa" -o "$RUN/decode.yaml" | tee /dev/stderr | sed -n 's/^overrides: //p')
deepspeech evaluate --checkpoint "$RUN/best.pt" --manifest "$EVAL" \
    --report "$RUN/eval_greedy.jsonl"
# shellcheck disable=SC2086  # the tuned overrides are several words
deepspeech evaluate --checkpoint "$RUN/best.pt" --manifest "$EVAL" \
    --report "$RUN/eval_beam.jsonl" $tuned
clip=$(python -c "from deepspeech.data.manifest import read_manifest; \
print(read_manifest('$EVAL')[0].audio_filepath)")
deepspeech transcribe --checkpoint "$RUN/best.pt" "$clip" --json
deepspeech plot "$RUN"
end=$(date +%s)
echo "recipe done in $(( end - start )) s (training $(( trained - start )) s);" \
     "decode settings: $RUN/decode.yaml, plots: $RUN/*.png"
