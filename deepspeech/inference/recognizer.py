"""A trained model with its features, vocabulary and decoder: audio in, text out.

``Recognizer.from_checkpoint`` rebuilds the pieces that training built from a
checkpoint alone (config, vocabulary, feature statistics, weights), which is all
that evaluation and transcription need; a model package (``deepspeech.inference.package``)
stands for a checkpoint everywhere, its decode settings and LM coming with it.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from deepspeech.config import Config, apply_override, load_decode_file
from deepspeech.data.corpus import load_corpus
from deepspeech.data.dataset import SpeechDataset
from deepspeech.data.probe import without_unreadable
from deepspeech.data.text import Vocabulary, build_normalizer
from deepspeech.decoding.greedy import WordSegment, greedy_decode, greedy_decode_words
from deepspeech.device import select_device
from deepspeech.errors import AudioError, CheckpointError, ConfigError
from deepspeech.execution import inference_plan
from deepspeech.features import FeatureExtractor, FeatureStats
from deepspeech.inference.package import read_model
from deepspeech.model import DeepSpeech2

if TYPE_CHECKING:  # imported where first used: it loads flashlight and the LM code
    from deepspeech.decoding.beam import BeamSearchDecoder

log = logging.getLogger(__name__)


class Recognizer:
    """A trained model with its features, vocabulary and decoder: audio in, text out."""

    def __init__(self, config: Config, vocabulary: Vocabulary, extractor: FeatureExtractor,
                 model: DeepSpeech2, device: torch.device, card: dict | None = None) -> None:
        self.config = config
        self.vocabulary = vocabulary
        self.extractor = extractor
        self.model = model.to(device).eval()
        self.device = device
        self.card = card or {}
        self._decoder = None
        # flashlight's decoder keeps its hypotheses in the object: one search at a time, as
        # the server calls from several threads (the acoustic model runs in parallel).
        self._decoder_lock = threading.Lock()

    @classmethod
    def from_checkpoint(cls, path: str | Path, overrides: Sequence[str] = (),
                        device: str = "auto", decode_file: str | None = None) -> Recognizer:
        """Rebuild from a checkpoint or a package folder; ``decode_file`` (a YAML decode
        section) and then ``overrides`` may change decode settings only."""
        stored = read_model(path)
        checkpoint = stored.checkpoint
        data = checkpoint.config
        data["decode"] = dict(data.get("decode") or {})  # a config may leave it out
        if stored.decode is not None:  # a package's own settings, its LM inside it
            data["decode"].update(stored.decode)
        if decode_file:
            data["decode"].update(load_decode_file(decode_file))
        for override in overrides:
            if not override.startswith("decode."):
                raise ConfigError(
                    f"override {override!r}: only decode.* can change at inference time"
                )
            apply_override(data, override)
        source = f"{path} (with {decode_file + ' and ' if decode_file else ''}overrides)"
        # The training run's files (manifests, init_from) need not exist where the model is
        # used; the decoder's (LM, lexicon) must.
        config = Config.from_dict(data, source=source)
        Config.from_dict({"decode": data["decode"]}, source=source, check_files=True)
        vocabulary = Vocabulary(checkpoint.vocabulary)
        stats = (FeatureStats.from_dict(checkpoint.feature_stats) if checkpoint.feature_stats
                 else None)
        extractor = FeatureExtractor(config.features, config.data.sample_rate, stats)
        if stats is not None and stats.mean.shape != (extractor.num_bins,):
            raise CheckpointError(f"{path}: the feature statistics hold {stats.mean.numel()} "
                                  f"bins, the config's features {extractor.num_bins}")
        _refuse_other_shapes(config, extractor.num_bins, len(vocabulary), checkpoint.model, path)
        chosen = select_device(device, what="--device")
        model = DeepSpeech2(config.model, extractor.num_bins, len(vocabulary),
                            inference_plan(config.execution, chosen).model_mode)
        try:
            model.load_state_dict(checkpoint.model)
        except RuntimeError as exc:
            raise CheckpointError(f"{path}: weights do not fit the stored config: {exc}") from None
        return cls(config, vocabulary, extractor, model, chosen, stored.card)

    def decode(self, log_probs: torch.Tensor, lengths: torch.Tensor) -> list[str]:
        """Greedy, or beam search with the LM when ``decode.mode`` is beam."""
        _finite(log_probs)
        if self.config.decode.mode == "greedy":
            return greedy_decode(log_probs, lengths, self.vocabulary)
        with self._decoder_lock:
            return self._beam_search().decode(log_probs, lengths)

    def decode_words(self, log_probs: torch.Tensor, lengths: torch.Tensor
                     ) -> list[tuple[str, list[WordSegment]]]:
        """``decode``'s texts with the words behind them: their frames and confidences."""
        _finite(log_probs)
        if self.config.decode.mode == "greedy":
            return greedy_decode_words(log_probs, lengths, self.vocabulary)
        with self._decoder_lock:
            return self._beam_search().decode_words(log_probs, lengths)

    def _beam_search(self) -> BeamSearchDecoder:
        """Built once, on first use (under the lock): it loads the LM, which greedy decoding
        never needs."""
        if self._decoder is None:
            from deepspeech.decoding.beam import BeamSearchDecoder

            self._decoder = BeamSearchDecoder(self.vocabulary, self.config.decode)
        return self._decoder

    def scored_dataset(self, manifest: str, skip_bad: bool = False) -> SpeechDataset:
        """Every utterance of ``manifest``, whatever its length, as evaluation scores it.
        Every problem, unreadable audio included, is named before any decoding starts, not
        met halfway through by a data-loader worker; ``skip_bad`` skips them instead, after
        decoding the audio once to find NaN samples too."""
        data_config = dataclasses.replace(
            self.config.data, min_duration=0.0, max_duration=math.inf,
            bad_input="skip" if skip_bad else self.config.data.bad_input)
        corpus = without_unreadable(
            load_corpus(manifest, self.vocabulary, build_normalizer(data_config), data_config),
            data_config.bad_input, decode=skip_bad,
            min_seconds=self.extractor.min_samples / self.extractor.sample_rate)
        return SpeechDataset(corpus.utterances, corpus.labels, self.extractor)

    def describe(self) -> dict:
        """The checkpoint's model card, with the decode settings in use and, where
        `deepspeech decode tune` recorded them beside it, the tuned ones: for ``--info``."""
        return {**self.card, "decode": self.config.to_dict()["decode"]}

    @torch.inference_mode()
    def log_probs(self, features: torch.Tensor,
                  lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """CTC log-probabilities ``[B, T', C]`` (on the CPU) and their lengths."""
        log_probs, out_lengths = self.model(features.to(self.device), lengths.to(self.device))
        return _finite(log_probs.float().cpu()), out_lengths.cpu()

    def frame_seconds(self) -> float:
        """Duration of one output frame (input hop times the time stride of the convs)."""
        return self.model.time_stride * self.config.features.hop_ms / 1000.0


def _refuse_other_shapes(config: Config, num_bins: int, classes: int,
                         weights: dict[str, torch.Tensor], path: str | Path) -> None:
    """Refuse a config whose model does not have the weights' shapes before building it: a
    config changed by hand (``model.rnn.hidden: 10000000``) would ask for any memory."""
    with torch.device("meta"):  # shapes without memory
        shapes = DeepSpeech2(config.model, num_bins, classes).state_dict()
    for name, tensor in shapes.items():
        stored = weights.get(name)
        if stored is not None and stored.shape != tensor.shape:
            need = sum(t.numel() * t.element_size() for t in shapes.values())
            raise CheckpointError(
                f"{path}: the config's model does not fit the weights: {name} is "
                f"{list(stored.shape)} in the weights, {list(tensor.shape)} by the config "
                f"(its model would need {need / 1e9:.3g} GB); restore the config the weights "
                "were trained with")


def _finite(log_probs: torch.Tensor) -> torch.Tensor:
    """``log_probs``, refused where NaN or plus infinity: samples far beyond full scale
    overflow the features, and a NaN would reach the text (as nothing) and the JSON (as no
    number). Minus infinity, a probability of 0 (half precision may round to it), is one."""
    if bool(log_probs.isnan().any() or log_probs.isposinf().any()):
        raise AudioError("the model's output is not finite (NaN or infinity): the audio's features "
                         "overflow (samples far beyond full scale, 1.0?)")
    return log_probs
