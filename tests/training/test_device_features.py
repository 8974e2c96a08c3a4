"""execution.features_on: device: workers that only decode, the features computed batched on
the training device, the same as the workers' up to float rounding and bitwise run to run."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile as sf
import torch

from deepspeech.config import load_config
from deepspeech.data.corpus import Corpus
from deepspeech.data.dataset import Batch
from deepspeech.data.manifest import Utterance
from deepspeech.data.sampler import BucketBatchSampler
from deepspeech.data.workers import loader_batches
from deepspeech.execution import resolve_plan
from deepspeech.features import FeatureExtractor
from deepspeech.training.checkpoint import load_checkpoint
from deepspeech.training.data import DeviceFeatureLoader, training_loader
from deepspeech.training.determinism import state_dict_digest
from deepspeech.training.trainer import train

AUGMENTED = ["data.augment.vtlp=[0.9,1.1]", "data.augment.speed=[0.9,1.1]",
             "features.spec_augment={freq_masks: 2, freq_width: 27, time_masks: 2, "
             "time_width: 0.05}"]


def _corpus(tmp_path, seconds=(0.9, 1.6, 0.4, 2.2, 1.1, 0.006)) -> Corpus:
    """Clips of speech-like noise; the last too short for one window (``bad_input``)."""
    rng = np.random.default_rng(0)
    utterances = []
    for number, duration in enumerate(seconds):
        samples = round(duration * 16000)
        envelope = np.abs(np.sin(np.linspace(0, 6 * np.pi, samples)))
        path = tmp_path / f"clip{number}.wav"
        sf.write(path, (0.3 * envelope * rng.standard_normal(samples)).astype(np.float32), 16000)
        utterances.append(Utterance(str(path), "a", duration))
    return Corpus("m.jsonl", utterances, [[1 + number, 2] for number in range(len(seconds))])


def _epoch(tmp_path, *overrides: str, device: str = "cpu") -> list[list[Batch | None]]:
    config = load_config(None, ["data.num_workers=0", "data.bad_input=skip",
                                "train.batch_size=4", "train.micro_batch_size=2",
                                f"train.device={device}", *overrides], check_files=False)
    corpus = _corpus(tmp_path)
    extractor = FeatureExtractor(config.features, config.data.sample_rate)
    sampler = BucketBatchSampler(corpus.utterances.durations.tolist(), 4, seed=0,
                                 sortagrad=False, micro_batch_size=2)
    plan = resolve_plan(config.execution, torch.device(device))
    return list(loader_batches(training_loader(config, corpus, extractor, sampler, plan)))


def _assert_same_batches(device_steps, worker_steps, tolerance: float) -> None:
    assert len(device_steps) == len(worker_steps)
    for on_device, in_workers in zip(device_steps, worker_steps, strict=True):
        assert [b is None for b in on_device] == [b is None for b in in_workers]
        for a, b in zip(on_device, in_workers, strict=True):
            if a is None:
                continue
            assert a.indices == b.indices
            assert torch.equal(a.feature_lengths, b.feature_lengths)
            assert torch.equal(a.targets, b.targets)
            assert torch.equal(a.target_lengths, b.target_lengths)
            features = a.features.cpu()
            assert features.shape == b.features.shape
            assert torch.equal(features == 0, b.features == 0)  # SpecAugment, padding
            torch.testing.assert_close(features, b.features, rtol=tolerance, atol=tolerance)


@pytest.mark.parametrize("normalize", ["utterance", "none"])
def test_device_features_on_the_cpu_are_the_workers_features(tmp_path, normalize):
    settings = [*AUGMENTED, f"features.normalize={normalize}"]
    on_device = _epoch(tmp_path, "execution.features_on=device", *settings)
    _assert_same_batches(on_device, _epoch(tmp_path, *settings), tolerance=1e-5)
    # the utterance too short for a window is left out as the workers leave it out
    assert sum(b.size for step in on_device for b in step if b is not None) == 5


def test_the_device_loader_starts_its_workers_when_iterated(tmp_path):
    config = load_config(None, ["data.num_workers=1", "execution.features_on=device"],
                         check_files=False)
    corpus = _corpus(tmp_path, seconds=(0.5, 0.6))
    extractor = FeatureExtractor(config.features, config.data.sample_rate)
    sampler = BucketBatchSampler([0.5, 0.6], 2, seed=0)
    loader = training_loader(config, corpus, extractor, sampler,
                             resolve_plan(config.execution, torch.device("cpu")))
    assert isinstance(loader, DeviceFeatureLoader) and loader.num_workers == 1
    [[batch]] = list(loader_batches(loader))
    assert batch.features.shape == (2, extractor.num_bins, extractor.num_frames(9600))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_gpu_features_are_bitwise_run_to_run_and_close_to_the_workers(tmp_path, monkeypatch):
    settings = [*AUGMENTED, "features.normalize=utterance"]
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True)  # as training runs: none of it may be refused
    try:
        first, second = (_epoch(tmp_path, "execution.features_on=device", *settings, device="cuda")
                         for _ in range(2))
    finally:
        torch.use_deterministic_algorithms(False)
    for a, b in zip(first, second, strict=True):
        for x, y in zip(a, b, strict=True):
            assert (x is None and y is None) or (x.features.is_cuda
                                                 and torch.equal(x.features, y.features))
    _assert_same_batches(first, _epoch(tmp_path, *settings), tolerance=1e-3)


@pytest.mark.slow  # two short trainings
def test_training_on_device_features_is_bitwise_run_to_run(tiny_corpus, tiny_overrides, tmp_path):
    digests = []
    for name in ("a", "b"):
        config = load_config(None, [*tiny_overrides(tiny_corpus, tmp_path / name),
                                    "execution.features_on=device", "train.epochs=1"])
        assert train(config).steps == 6
        digests.append(state_dict_digest(load_checkpoint(tmp_path / name / "last.pt").model))
    assert digests[0] == digests[1]
