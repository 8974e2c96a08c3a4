"""Tuning the beam search's LM weight and word bonus on a dev set.

The acoustic model runs once: its log-probs are kept, and every (lm_weight,
word_bonus) pair of the grid re-decodes them with a sibling decoder that shares
the loaded LM (``BeamSearchDecoder.with_weights``). The pair with the lowest
corpus-level WER wins (CER breaks ties, then grid order), as in Deep Speech 2,
where alpha and beta are tuned on a held-out set. The winning pair becomes a ``decode:``
section validated like a config file, its LM and lexicon paths relative to the file it is
written to, so that the two can move together (``deepspeech decode tune -o``).
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm import tqdm

from deepspeech.config import Config, DecodeConfig
from deepspeech.data.text import Vocabulary
from deepspeech.decoding.beam import BeamSearchDecoder
from deepspeech.decoding.greedy import greedy_decode
from deepspeech.decoding.vtln import warp_factors
from deepspeech.evaluation.evaluate import length_sorted_batches, model_outputs
from deepspeech.evaluation.metrics import char_errors, word_errors

log = logging.getLogger(__name__)

Lengths = torch.Tensor | Sequence[int] | int | None


@dataclass(frozen=True)
class TunePoint:
    """Error rates of one (lm_weight, word_bonus) pair."""

    lm_weight: float
    word_bonus: float
    wer: float
    cer: float


@dataclass
class TuneResult:
    """The best pair, every pair tried (in grid order), and greedy decoding for reference."""

    best: TunePoint
    table: list[TunePoint]
    greedy_wer: float
    greedy_cer: float

    @property
    def lm_weight(self) -> float:
        return self.best.lm_weight

    @property
    def word_bonus(self) -> float:
        return self.best.word_bonus

    def format(self) -> str:
        """The table as aligned text, best pair marked."""
        lines = [f"{'lm_weight':>10} {'word_bonus':>10} {'WER %':>8} {'CER %':>8}"]
        for point in self.table:
            mark = "  <- best" if point == self.best else ""
            lines.append(f"{point.lm_weight:>10g} {point.word_bonus:>10g} "
                         f"{100 * point.wer:>8.2f} {100 * point.cer:>8.2f}{mark}")
        lines.append(f"{'greedy':>21} {100 * self.greedy_wer:>8.2f} "
                     f"{100 * self.greedy_cer:>8.2f}")
        return "\n".join(lines)


def _batches(log_probs_list: Sequence[torch.Tensor],
             lengths: Sequence[Lengths]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Every entry as a ``[batch, frames, classes]`` tensor on the CPU with its lengths."""
    if len(lengths) != len(log_probs_list):
        raise ValueError(f"{len(log_probs_list)} log-prob tensors but {len(lengths)} lengths")
    batches = []
    for scores, length in zip(log_probs_list, lengths, strict=True):
        scores = scores.detach().to("cpu", torch.float32)
        if scores.dim() == 2:
            scores = scores.unsqueeze(0)
            length = None if length is None else [int(torch.as_tensor(length))]
        if length is None:
            length = [scores.shape[1]] * scores.shape[0]
        batches.append((scores.contiguous(), torch.as_tensor(length, dtype=torch.long).cpu()))
    return batches


def tune_decoder(
    log_probs_list: Sequence[torch.Tensor],
    lengths: Sequence[Lengths],
    references: Sequence[str],
    vocabulary: Vocabulary,
    base_config: DecodeConfig,
    lm_weights: Sequence[float],
    word_bonuses: Sequence[float],
    progress: bool = False,
) -> TuneResult:
    """Grid search of lm_weight x word_bonus by WER on precomputed log-probs.

    ``log_probs_list`` holds ``[batch, frames, classes]`` (or one utterance's
    ``[frames, classes]``) log-probs, ``lengths`` their valid frame counts (a tensor
    or list per batch, an int or None per single utterance), and ``references``
    the normalized transcripts of all utterances in the same order.
    """
    if not lm_weights or not word_bonuses:
        raise ValueError("give at least one lm_weight and one word_bonus")
    batches = _batches(log_probs_list, lengths)
    count = sum(len(batch_lengths) for _, batch_lengths in batches)
    if count != len(references):
        raise ValueError(f"{count} utterances but {len(references)} references")

    def errors(hypotheses: list[str]) -> tuple[float, float]:
        return word_errors(references, hypotheses).rate, char_errors(references, hypotheses).rate

    greedy = [text for scores, n in batches for text in greedy_decode(scores, n, vocabulary)]
    greedy_wer, greedy_cer = errors(greedy)

    config = dataclasses.replace(base_config, mode="beam")
    decoder = BeamSearchDecoder(vocabulary, config)
    grid = [(a, b) for a in lm_weights for b in word_bonuses]
    table: list[TunePoint] = []
    for lm_weight, word_bonus in tqdm(grid, desc="tuning", disable=not progress):
        sibling = decoder.with_weights(float(lm_weight), float(word_bonus))
        hypotheses = [text for scores, n in batches for text in sibling.decode(scores, n)]
        wer, cer = errors(hypotheses)
        table.append(TunePoint(float(lm_weight), float(word_bonus), wer, cer))
        log.debug("lm_weight %g word_bonus %g: WER %.4f CER %.4f", lm_weight, word_bonus, wer, cer)
    best = min(table, key=lambda p: (p.wer, p.cer))  # min keeps the first of equals
    log.info("best lm_weight %g, word_bonus %g: WER %.2f%% (greedy %.2f%%)",
             best.lm_weight, best.word_bonus, 100 * best.wer, 100 * greedy_wer)
    return TuneResult(best=best, table=table, greedy_wer=greedy_wer, greedy_cer=greedy_cer)


def dev_log_probs(recognizer, manifest: str, batch_size: int = 32, workers: int = 0,
                  skip_bad: bool = False
                  ) -> tuple[list[torch.Tensor], list[torch.Tensor], list[str]]:
    """Log-probs, output lengths (one entry per batch) and references of a manifest, with
    the checkpoint's ``decode.vtln`` applied as ``deepspeech evaluate`` applies it."""
    dataset = recognizer.scored_dataset(manifest, skip_bad)
    batches = length_sorted_batches(dataset.durations(), batch_size)
    log_probs, lengths, references = [], [], []
    for indices, _, scores, out_lengths in model_outputs(
            recognizer.model, dataset, batches, workers, warp_factors(recognizer.config.decode)):
        log_probs.append(scores)
        lengths.append(out_lengths)
        references += [recognizer.vocabulary.decode(dataset.labels[i]) for i in indices]
    return log_probs, lengths, references


def relative_paths(section: dict, output: Path) -> dict:
    """``section`` with its file paths relative to ``output``'s folder, as
    ``load_decode_file`` resolves them: the file and its LM can move together."""
    folder = output.absolute().parent
    return {key: os.path.relpath(value, folder) if key in ("lm", "lexicon") and value else value
            for key, value in section.items()}


def decode_section(base, lm_weight: float, word_bonus: float) -> dict:
    """The ``decode:`` mapping of a tuned beam search, validated like a config file."""
    section = dataclasses.asdict(dataclasses.replace(
        base, mode="beam", lm_weight=float(lm_weight), word_bonus=float(word_bonus)))
    Config.from_dict({"decode": section}, source="tuned decode section", check_files=True)
    return section
