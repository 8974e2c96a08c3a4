"""SpeechDataset crosses into data-loader workers that are not forked."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import soundfile as sf
import torch
from torch.utils.data import DataLoader

from deepspeech.config import FeaturesConfig
from deepspeech.data.dataset import SpeechDataset, collate
from deepspeech.data.manifest import Utterance
from deepspeech.features import FeatureExtractor


def make_dataset(tmp_path, count: int) -> SpeechDataset:
    path = tmp_path / "clip.wav"
    sf.write(path, np.random.default_rng(0).normal(0, 0.1, 4000).astype(np.float32), 16000)
    utterances = [Utterance(str(path), "a", 0.25) for _ in range(count)]
    labels = [[1 + i % 27] * (i % 5) for i in range(count)]  # some empty
    return SpeechDataset(utterances, labels, FeatureExtractor(FeaturesConfig(), 16000))


def test_pickled_dataset_carries_its_labels_by_value_as_a_few_arrays(tmp_path):
    dataset = make_dataset(tmp_path, 7)
    assert isinstance(dataset.labels.flat, np.ndarray)
    restored = pickle.loads(pickle.dumps(dataset))
    assert [restored.labels[i] for i in range(7)] == [[1 + i % 27] * (i % 5) for i in range(7)]
    assert all(restored.label(i).dtype == torch.int32 for i in range(7))
    assert restored.utterances[3] == dataset.utterances[3]


@pytest.mark.slow  # starts a fork server
def test_forkserver_workers_take_a_corpus_of_many_utterances(tmp_path):
    # each label tensor used to travel as a file descriptor: "too many fds" past ~250
    dataset = make_dataset(tmp_path, 600)
    loader = DataLoader(dataset, batch_size=300, num_workers=1, collate_fn=collate,
                        multiprocessing_context="forkserver")
    batches = list(loader)
    assert [len(batch.indices) for batch in batches] == [300, 300]
    assert batches[1].target_lengths.tolist()[:5] == [0, 1, 2, 3, 4]
