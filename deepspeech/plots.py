"""Pictures of a run, for people: learning curves and one utterance's CTC alignment.

``deepspeech plot runs/x`` (also called at the end of training) writes
``loss.png``, ``error_rates.png`` and ``alignment.png`` into the run folder.
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch
import yaml

from deepspeech.errors import DeepSpeechError
from deepspeech.training.metrics import read_metrics

log = logging.getLogger(__name__)


def _pyplot():
    """pyplot on the file-only Agg backend: plots are written on machines without a screen."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _series(records: list[dict], key: str) -> tuple[list[int], list[float]]:
    points = [(r["step"], r[key]) for r in records if key in r]
    return [p[0] for p in points], [p[1] for p in points]


def _run_metrics(run_dir: Path) -> list[dict]:
    metrics_path = run_dir / "metrics.jsonl"
    if not metrics_path.is_file():
        raise DeepSpeechError(f"{run_dir}: no metrics.jsonl (is this a training run folder?)")
    records = read_metrics(metrics_path)
    if not records:
        raise DeepSpeechError(f"{metrics_path}: nothing logged yet")
    return records


def _save(plt, figure, axis, path: Path) -> Path:
    axis.grid(alpha=0.3)
    axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def plot_curves(run_dir: Path) -> list[Path]:
    """Loss and CER/WER against steps from ``metrics.jsonl``."""
    records = _run_metrics(run_dir)
    plt = _pyplot()
    written = []
    figure, axis = plt.subplots(figsize=(7, 4))
    for key, label in (("train/loss", "train"), ("val/loss", "validation")):
        steps, values = _series(records, key)
        if steps:
            axis.plot(steps, values, label=label, marker="o" if key.startswith("val") else None)
    axis.set(xlabel="step", ylabel="CTC loss per utterance", title=f"{run_dir.name}: loss")
    axis.set_yscale("log")
    written.append(_save(plt, figure, axis, run_dir / "loss.png"))

    steps_wer, wer = _series(records, "val/wer")
    steps_cer, cer = _series(records, "val/cer")
    if steps_wer:
        figure, axis = plt.subplots(figsize=(7, 4))
        axis.plot(steps_wer, [100 * v for v in wer], marker="o", label="WER")
        axis.plot(steps_cer, [100 * v for v in cer], marker="o", label="CER")
        axis.set(xlabel="step", ylabel="%", title=f"{run_dir.name}: validation error rates")
        axis.set_ylim(bottom=0)
        written.append(_save(plt, figure, axis, run_dir / "error_rates.png"))
    return written


def training_stages(run_dir: Path) -> list[Path]:
    """The run folders a run grew from, oldest first, ending with ``run_dir`` itself.

    A fine-tuning run's clock starts where its pre-training's stopped: the minutes a
    recipe costs are both stages', so the chain is followed through each run's
    ``train.init_from`` (as its ``config.yaml`` recorded it; a relative path is read
    from the current directory, as training read it) for as long as the checkpoint
    sits in a folder with metrics of its own.
    """
    stages = [run_dir]
    while True:
        config_path = stages[0] / "config.yaml"
        if not config_path.is_file():
            return stages
        try:
            config = yaml.safe_load(config_path.read_text()) or {}
        except yaml.YAMLError as error:
            raise DeepSpeechError(f"{config_path}: not valid YAML ({error})") from None
        init_from = (config.get("train") or {}).get("init_from")
        if not init_from:
            return stages
        parent = Path(init_from).parent
        if not (parent / "metrics.jsonl").is_file() or parent.resolve() in (
                stage.resolve() for stage in stages):
            return stages
        stages.insert(0, parent)


def wer_against_minutes(run_dir: Path) -> tuple[list[float], list[float]]:
    """(minutes, WER %) of every validation of a run and of the runs it grew from (both
    empty for a run without validations).

    Each stage's minutes count from its first metrics record (its first ``log_every``
    steps) and continue from where the previous stage's last record left off.
    """
    minutes, wers = [], []
    elapsed = 0.0
    for stage in training_stages(run_dir):
        records = _run_metrics(stage)
        start = records[0]["time"]
        for record in records:
            if "val/wer" in record:
                minutes.append(elapsed + (record["time"] - start) / 60)
                wers.append(100 * record["val/wer"])
        elapsed += (records[-1]["time"] - start) / 60
    return minutes, wers


def plot_wer_against_minutes(run_dirs: list[Path], output: Path) -> Path:
    """Validation WER of several runs against wall-clock minutes: accuracy per CPU minute.

    A run started from another's checkpoint carries that run's minutes and validations
    before its own (``training_stages``).
    """
    curves = {run_dir: wer_against_minutes(run_dir) for run_dir in run_dirs}
    unvalidated = [str(run_dir) for run_dir, (_, wers) in curves.items() if not wers]
    if len(unvalidated) == len(run_dirs):
        raise DeepSpeechError(f"no validation WER recorded in {', '.join(unvalidated)}")
    if unvalidated:  # a run without validations does not keep the others from the figure
        log.warning("left out of %s, no validation WER recorded: %s", output,
                    ", ".join(unvalidated))
    plt = _pyplot()
    figure, axis = plt.subplots(figsize=(7, 4))
    for run_dir, (minutes, wers) in curves.items():
        if wers:
            axis.plot(minutes, wers, marker="o", label=run_dir.name)
    axis.set(xlabel="training minutes", ylabel="validation WER (%)",
             title="validation WER against training time")
    axis.set_ylim(bottom=0)
    output.parent.mkdir(parents=True, exist_ok=True)
    return _save(plt, figure, axis, output)


def plot_alignment(checkpoint: Path, audio_path: str, output: Path) -> Path:
    """Spectrogram of one utterance over the model's CTC posteriors and greedy path."""
    from deepspeech.data.audio import load_audio
    from deepspeech.inference.recognizer import Recognizer

    plt = _pyplot()
    recognizer = Recognizer.from_checkpoint(checkpoint, device="cpu")
    waveform = load_audio(audio_path, recognizer.extractor.sample_rate)
    features = recognizer.extractor(waveform)
    log_probs, lengths = recognizer.log_probs(features.unsqueeze(0),
                                              torch.tensor([features.shape[1]]))
    posteriors = log_probs[0, : int(lengths[0])].exp()
    text = recognizer.decode(log_probs, lengths)[0]
    frame_s = recognizer.frame_seconds()
    hop_s = recognizer.config.features.hop_ms / 1000
    duration = features.shape[1] * hop_s

    figure, (top, bottom) = plt.subplots(2, 1, figsize=(10, 6), sharex=True)
    top.imshow(features.numpy(), origin="lower", aspect="auto", cmap="magma",
               extent=(0, duration, 0, features.shape[0]))
    top.set(ylabel="frequency bin", title=f"{Path(audio_path).name}: \u201c{text}\u201d")
    labels = ["\u2205"] + [c if c != " " else "\u2423" for c in recognizer.vocabulary.characters]
    bottom.imshow(posteriors.T.numpy(), origin="lower", aspect="auto", cmap="Greys",
                  extent=(0, posteriors.shape[0] * frame_s, -0.5, len(labels) - 0.5),
                  interpolation="nearest")
    best = posteriors.argmax(dim=1)
    for frame, index in enumerate(best.tolist()):
        if index != 0 and (frame == 0 or best[frame - 1] != index):
            bottom.annotate(labels[index], ((frame + 0.5) * frame_s, index), color="tab:red",
                            ha="center", va="center", fontsize=8, weight="bold")
    bottom.set_yticks(range(len(labels)), labels, fontsize=6)
    bottom.set(xlabel="time (s)", ylabel="CTC output", title="posteriors and greedy path")
    figure.tight_layout()
    figure.savefig(output, dpi=110)
    plt.close(figure)
    return output


def plot_run(run_dir: str | Path) -> list[Path]:
    """Every picture for a run folder; returns the files written."""
    from deepspeech.data.manifest import read_manifest
    from deepspeech.training.checkpoint import load_checkpoint

    run_dir = Path(run_dir)
    written = plot_curves(run_dir)
    checkpoint = next((run_dir / name for name in ("best.pt", "last.pt")
                       if (run_dir / name).is_file()), None)
    if checkpoint is not None:
        val_manifest = load_checkpoint(checkpoint).config["data"]["val_manifest"]
        if val_manifest and Path(val_manifest).is_file():
            first = read_manifest(val_manifest)[0]
            written.append(plot_alignment(checkpoint, first.audio_filepath,
                                          run_dir / "alignment.png"))
    return written
