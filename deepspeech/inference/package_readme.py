"""A model package's ``README.md``: its model card for people, in the Hugging Face style
(front matter that the Hub reads, then prose), written from the machine-readable card."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from deepspeech import DISTRIBUTION


def readme(card: dict[str, Any], name: str, license: str = "other") -> str:
    """The package's ``README.md``: Hugging Face model-card front matter, then prose."""
    results = []
    validation, tuned_on = card.get("validation"), card.get("decode_tuned_on")
    if validation:
        results.append(_result(validation, "validation", "greedy"))
    if tuned_on:
        results.append(_result(tuned_on, "tuning", f"beam search, LM weight "
                               f"{card['decode']['lm_weight']:g}"))
    front = {"library_name": DISTRIBUTION, "license": license,
             "pipeline_tag": "automatic-speech-recognition",
             "tags": ["automatic-speech-recognition", "ctc", "deepspeech2", "safetensors"]}
    if results:
        front["model-index"] = [{"name": name, "results": results}]
    data, decode = card.get("train_data") or {}, card["decode"]
    lines = ["---", yaml.safe_dump(front, sort_keys=False).rstrip(), "---", "",
             f"# {name}", "",
             f"A Deep Speech 2 model ({card.get('model', '?')}, "
             f"{card.get('parameters') or 0:,} parameters) trained with CTC by "
             "deepspeech and exported as a model package: weights in "
             "safetensors, every other file plain text, no pickle.", "", "## Data", ""]
    if data:
        lines.append(f"Trained to step {card.get('step')} (epoch {card.get('epoch')}) on "
                     f"{data.get('utterances')} utterances, {data.get('hours')} h: "
                     + ", ".join(f"`{item}`" for item in data.get("manifests", [])) + ".")
    else:
        lines.append("The checkpoint recorded no training data.")
    if validation:
        lines.append(f"Validation at step {validation.get('step')} on `{validation['manifest']}` "
                     f"({validation['utterances']} utterances, greedy decoding): WER "
                     f"{100 * validation['wer']:.2f}%, CER {100 * validation['cer']:.2f}%.")
    features = card.get("features", {})
    lines += ["", "## Parameters", "",
              f"- input: {card.get('sample_rate')} Hz mono audio, "
              + ", ".join(f"{key} {value}" for key, value in features.items()),
              f"- output: CTC over {len(card.get('vocabulary', ''))} characters "
              f"`{card.get('vocabulary', '')!r}` plus blank",
              f"- config digest {card.get('config_digest')}; the full config: `config.yaml`",
              "", "## Decode settings", "",
              f"In `decode.yaml`, from {card.get('decode_from')}: mode {decode['mode']}"
              + (f", beam {decode['beam']}, LM `{decode['lm']}` with weight "
                 f"{decode['lm_weight']:g}, word bonus {decode['word_bonus']:g}"
                 if decode["mode"] == "beam" else "") + "."]
    if tuned_on:
        lines.append(f"Tuned on `{tuned_on['manifest']}` ({tuned_on['utterances']} "
                     f"utterances): WER {100 * tuned_on['wer']:.2f}% (greedy "
                     f"{100 * tuned_on['greedy_wer']:.2f}%), CER {100 * tuned_on['cer']:.2f}%.")
    lines += ["", "## How to use it", "",
              f"With the `{DISTRIBUTION}` distribution installed from its source "
              f"(`pip install ./{DISTRIBUTION}`; PyPI's `deepspeech` is Mozilla's DeepSpeech, "
              "another program with the same import name):", "", "```bash",
              "sha256sum -c checksums.sha256     # deepspeech checks them too, on every load",
              f"deepspeech transcribe --checkpoint {name} clip.wav --json",
              f"deepspeech evaluate --checkpoint {name} --manifest test.jsonl",
              f"deepspeech transcribe --checkpoint {name} --info   # this card, as JSON",
              "```", "", "```python",
              "from deepspeech.inference.recognizer import Recognizer",
              "from deepspeech.inference.transcribe import transcribe_file",
              "", f'recognizer = Recognizer.from_checkpoint("{name}")',
              'print(transcribe_file(recognizer, "clip.wav").text)', "```", "",
              "Any command that takes `--checkpoint` takes this folder, moved or copied "
              "anywhere; a changed, missing or added file is refused by name.", "",
              "## License", "",
              f"`{license}`" + (": the exporter did not know it; ask the model's owner."
                                if license == "other" else "."), ""]
    return "\n".join(lines)


def _result(scores: dict[str, Any], split: str, decoding: str) -> dict[str, Any]:
    return {"task": {"type": "automatic-speech-recognition", "name": "Speech Recognition"},
            "dataset": {"name": scores["manifest"], "type": Path(scores["manifest"]).stem,
                        "split": split, "args": {"utterances": scores["utterances"]}},
            "metrics": [{"type": "wer", "value": round(100 * scores["wer"], 2),
                         "name": f"WER % ({decoding})"},
                        {"type": "cer", "value": round(100 * scores["cer"], 2),
                         "name": f"CER % ({decoding})"}]}
