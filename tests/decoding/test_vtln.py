"""Inference VTLN: the warp grid, the judge of warps, and the choice it drives."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from deepspeech.config import DataConfig, DecodeConfig, FeaturesConfig
from deepspeech.data.corpus import load_corpus
from deepspeech.data.dataset import SpeechDataset
from deepspeech.data.text import TextNormalizer, Vocabulary
from deepspeech.decoding.vtln import transcript_log_likelihood, warp_factors
from deepspeech.evaluation.evaluate import model_outputs
from deepspeech.features import FeatureExtractor


def test_the_grid_runs_from_low_to_high_in_steps():
    assert warp_factors(DecodeConfig()) == [1.0]
    assert warp_factors(DecodeConfig(vtln=[0.9, 1.1], vtln_step=0.05)) == [0.9, 0.95, 1.0, 1.05,
                                                                          1.1]
    assert warp_factors(DecodeConfig(vtln=[0.85, 1.15])) == pytest.approx(
        [0.85 + 0.025 * i for i in range(13)])
    assert warp_factors(DecodeConfig(vtln=[0.9, 1.0], vtln_step=0.3)) == [0.9]


def test_the_judge_is_the_ctc_likelihood_of_the_greedy_transcript_per_frame():
    log_probs = torch.randn(2, 9, 4, generator=torch.Generator().manual_seed(0)).log_softmax(-1)
    lengths = torch.tensor([9, 5])
    padded = log_probs.clone()
    padded[1, 5:] = torch.tensor([0.0, -9.0, -9.0, -9.0])  # past the length: must not count
    scores = transcript_log_likelihood(padded, lengths)
    for row, frames in enumerate(lengths.tolist()):
        path = torch.unique_consecutive(log_probs[row, :frames].argmax(-1))
        transcript = path[path != 0]
        expected = -F.ctc_loss(log_probs[row, :frames], transcript, torch.tensor(frames),
                               torch.tensor(len(transcript)), reduction="sum") / frames
        assert float(scores[row]) == pytest.approx(float(expected), rel=1e-5)
    sharper = (log_probs * 4).log_softmax(-1)  # the same argmax, surer of it
    assert (transcript_log_likelihood(sharper, lengths)
            > transcript_log_likelihood(log_probs, lengths)).all()


class _LikesOneWarp(torch.nn.Module):
    """A "model" whose output is sure only on features warped by ``favourite``."""

    def __init__(self, reference: dict[int, torch.Tensor]) -> None:
        super().__init__()
        self.reference = reference
        self.weight = torch.nn.Parameter(torch.zeros(1))

    def forward(self, features, lengths):
        batch, _, frames = features.shape
        log_probs = torch.full((batch, frames, 3), math.log(1 / 3))
        for row in range(batch):
            match = [index for index, expected in self.reference.items()
                     if expected.shape[1] == int(lengths[row])
                     and torch.equal(features[row, :, :lengths[row]], expected)]
            if match:
                log_probs[row, :, 1] = 0.0
        return log_probs, lengths


def test_each_utterance_keeps_the_output_of_its_most_confident_warp(tiny_corpus):
    config = DataConfig(sample_rate=16000)
    corpus = load_corpus(tiny_corpus["val"], Vocabulary.english(), TextNormalizer(), config)
    dataset = SpeechDataset(corpus.utterances[:4], corpus.labels[:4],
                            FeatureExtractor(FeaturesConfig(), 16000))
    favourite = {0: 0.9, 1: 1.1, 2: 1.0, 3: 0.9}
    model = _LikesOneWarp({index: dataset.at_warp(warp)[index][1]
                           for index, warp in favourite.items()})
    batches = [[2, 0], [3, 1]]
    outputs = list(model_outputs(model, dataset, batches, warps=[0.9, 1.0, 1.1]))
    assert [indices for indices, *_ in outputs] == batches
    for indices, feature_lengths, log_probs, out_lengths in outputs:
        assert torch.equal(feature_lengths, out_lengths)
        for row in range(len(indices)):
            assert (log_probs[row, :out_lengths[row], 1] == 0).all()  # the sure one won
    # One warp: the dataset as it is, and nothing chosen.
    plain = list(model_outputs(model, dataset, [[2]], warps=[1.0]))
    assert (plain[0][2][0, :, 1] == 0).all()
