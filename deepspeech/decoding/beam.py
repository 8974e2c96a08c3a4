"""CTC beam search with an n-gram language model (flashlight's decoder, via torchaudio).

Deep Speech 2 decodes by maximizing  log p_ctc(y|x) + alpha log p_lm(y) + beta |y|
(acoustic score, LM weight, word bonus) with a prefix beam search that sums the
probabilities of all alignments of a prefix (``log_add``), unlike greedy decoding,
which follows one alignment.

Three modes, chosen from the config:

* lexicon (``decode.lexicon`` given, or built from the LM's 1-grams): words are
  spelled through a trie, each word scored by the word LM when its spelling ends;
  ``word_bonus`` is added per word. Only lexicon words can be output.
* lexicon-free with a character LM (an ARPA file whose 1-grams are the model's
  characters, ``|`` for the space: ``deepspeech lm build --units char``).
* lexicon-free without an LM: pure CTC prefix beam search.

Flashlight needs a token list and a word separator ("silence") token: the tokens
are the vocabulary in output-column order (index 0 = blank), with our space
written ``|``. A lexicon spells each word followed by ``|``. Because the acoustic
model is trained on transcripts that end without a space, one frame that can only
be ``|`` is appended after each utterance so that its last word ends too.
Decoders are built once (loading an LM costs far more than decoding a sentence);
``with_weights`` makes a sibling for tuning that shares the loaded LM.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import os
import re
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, NoReturn

import torch

from deepspeech.config import DecodeConfig
from deepspeech.data.text import BLANK, Vocabulary
from deepspeech.decoding.greedy import WordSegment
from deepspeech.errors import DeepSpeechError
from deepspeech.lm import BOS, CHAR_SEPARATOR, EOS, UNK, LanguageModelError, is_arpa, read_unigrams

log = logging.getLogger(__name__)

# Score of the classes other than the separator in the frame appended after each
# utterance (finite: -inf would make log-add produce NaN).
_IMPOSSIBLE = -1.0e4


class DecoderError(DeepSpeechError):
    """The decoder cannot be built from the given LM, lexicon or vocabulary."""


def _flashlight():
    """torchaudio's decoder factory and flashlight's KenLM and Dictionary classes."""
    try:
        from flashlight.lib.text.dictionary import Dictionary
        from torchaudio.models.decoder import ctc_decoder
    except ImportError as exc:
        raise DecoderError(
            f"beam search needs the flashlight-text package ({exc}); "
            "install it with: pip install flashlight-text") from None
    try:
        from flashlight.lib.text.decoder.kenlm import KenLM
    except ImportError:
        from flashlight.lib.text.decoder import KenLM
    return ctc_decoder, KenLM, Dictionary


def _kenlm_reason(error: RuntimeError) -> str:
    """KenLM's message without the C++ source location and signature it starts with."""
    text = " ".join(str(error).split())
    return re.split(r" threw \w+(?: because `[^']*')?\. ", text, maxsplit=1)[-1]


@contextlib.contextmanager
def _stderr_to_log() -> Iterator[None]:
    """Send what C++ code writes to stderr (KenLM's progress bar) to the debug log."""
    try:
        saved = os.dup(2)
    except OSError:  # no usable stderr: nothing to redirect
        yield
        return
    with tempfile.TemporaryFile() as capture:
        sys.stderr.flush()
        os.dup2(capture.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            capture.seek(0)
            text = capture.read().decode("utf-8", "replace").strip()
            if text:
                log.debug("KenLM: %s", text)


def token_names(vocabulary: Vocabulary) -> tuple[list[str], str]:
    """Flashlight token names in output-column order, and the separator token."""
    separator = CHAR_SEPARATOR if CHAR_SEPARATOR not in vocabulary.characters else "<space>"
    names = [BLANK] + [separator if ch == " " else ch for ch in vocabulary.characters]
    if len(set(names)) != len(names) or any(ch.isspace() and ch != " " for ch in names):
        raise DecoderError(f"vocabulary {vocabulary!r} cannot be written as decoder tokens")
    # A vocabulary without a space (e.g. Mandarin) has no separator column; the blank
    # stands in for it, which flashlight treats as the state before the first token.
    return names, separator if " " in vocabulary.characters else BLANK


@dataclasses.dataclass
class _Resources:
    """What every decoder of one vocabulary + LM + lexicon shares (loaded once)."""

    tokens: list[str]
    separator: str
    lexicon: str | None  # lexicon file text ("word<TAB>s p e l l i n g |" lines)
    words: str | None  # the LM dictionary file text (lexicon words, then <unk>)
    lm: Any  # flashlight LM object, or None
    mode: str

    @classmethod
    def load(cls, vocabulary: Vocabulary, config: DecodeConfig) -> _Resources:
        _, kenlm_class, dictionary_class = _flashlight()
        tokens, separator = token_names(vocabulary)
        if config.lm and not Path(config.lm).is_file():
            raise DecoderError(f"{config.lm}: language model file not found")
        lexicon = words = None
        mode = "lexicon-free"
        unigrams = _unigrams(Path(config.lm)) if config.lm and not config.lexicon else []
        char_lm = bool(unigrams) and _is_char_lm(unigrams, tokens, separator)
        if (config.lexicon or unigrams) and not char_lm and separator == BLANK:
            raise DecoderError(
                f"vocabulary {vocabulary!r} has no space, so words cannot be decoded with a "
                "lexicon or a word LM; use a character LM (deepspeech lm build --units char)")
        if config.lexicon:
            lexicon = _read_lexicon(Path(config.lexicon), tokens, separator)
        elif unigrams and not char_lm:
            lexicon = _lexicon_from_words(unigrams, vocabulary, separator, config.lm)
        if lexicon is not None:
            mode = "lexicon"
            names = sorted({line.split("\t", 1)[0] for line in lexicon.splitlines()})
            words = "\n".join([w for w in names if w != UNK] + [UNK]) + "\n"
        lm = None
        if config.lm:
            with tempfile.TemporaryDirectory(prefix="deepspeech-decoder-") as tmp:
                dictionary = Path(tmp) / "dictionary.txt"
                dictionary.write_text(words if words is not None else "\n".join(tokens) + "\n",
                                      encoding="utf-8")
                log.info("loading language model %s", config.lm)
                try:
                    with _stderr_to_log():
                        lm = kenlm_class(str(config.lm), dictionary_class(str(dictionary)))
                except RuntimeError as exc:
                    raise DecoderError(
                        f"{config.lm}: KenLM cannot load this model: {_kenlm_reason(exc)}"
                    ) from None
            if char_lm:
                mode = "lexicon-free + character LM"
        return cls(tokens, separator, lexicon, words, lm, mode)

    def build(self, config: DecodeConfig):
        """A torchaudio ``CTCDecoder`` with this config's beam and weights."""
        ctc_decoder, _, _ = _flashlight()
        with tempfile.TemporaryDirectory(prefix="deepspeech-decoder-") as tmp:
            tokens = Path(tmp) / "tokens.txt"
            tokens.write_text("\n".join(self.tokens) + "\n", encoding="utf-8")
            lexicon = dictionary = None
            if self.lexicon is not None:
                lexicon = Path(tmp) / "lexicon.txt"
                lexicon.write_text(self.lexicon, encoding="utf-8")
                dictionary = Path(tmp) / "words.txt"
                dictionary.write_text(self.words or "", encoding="utf-8")
            elif self.lm is not None:
                dictionary = tokens  # a character LM's words are the tokens
            return ctc_decoder(
                lexicon=str(lexicon) if lexicon else None,
                tokens=str(tokens),
                lm=self.lm,
                lm_dict=str(dictionary) if dictionary else None,
                # The whole final beam: decode_words weighs each word by the share of it
                # that agrees (28% more decoding time than one hypothesis on AN4 dev).
                nbest=config.beam,
                beam_size=config.beam,
                beam_threshold=config.beam_threshold,
                lm_weight=config.lm_weight,
                word_score=config.word_bonus,
                unk_score=-math.inf,
                sil_score=0.0,
                # Sum over alignments of the same prefix: CTC's prefix beam search.
                log_add=True,
                blank_token=BLANK,
                sil_token=self.separator,
                unk_word=UNK,
            )


def _unigrams(path: Path) -> list[str]:
    if not is_arpa(path):
        raise DecoderError(
            f"{path}: not an ARPA file, so its words cannot be listed; give decode.lexicon "
            "(one word per line: word, then its spelling in characters, then |)")
    try:
        return read_unigrams(path)
    except LanguageModelError as exc:
        raise DecoderError(str(exc)) from None


def _is_char_lm(unigrams: list[str], tokens: list[str], separator: str) -> bool:
    """A character LM's words are tokens, the word separator among them (if there is one)."""
    units = {w for w in unigrams if w not in (BOS, EOS, UNK)}
    return bool(units) and units <= set(tokens[1:]) and (separator in units or separator == BLANK)


def _lexicon_from_words(unigrams: list[str], vocabulary: Vocabulary, separator: str,
                        source: str) -> str:
    characters = set(vocabulary.characters) - {" "}
    words = [w for w in unigrams if w not in (BOS, EOS, UNK)]
    usable = [w for w in words if all(ch in characters for ch in w)]
    if not usable:
        raise DecoderError(f"{source}: none of the LM's words can be spelled with the "
                           f"model's vocabulary {vocabulary!r}")
    if len(usable) < len(words):
        log.warning("%s: %d of %d LM words use characters outside the vocabulary and "
                    "cannot be decoded", source, len(words) - len(usable), len(words))
    spell = {" ": separator}
    return "".join(f"{w}\t{' '.join(spell.get(ch, ch) for ch in w)} {separator}\n"
                   for w in usable)


def _read_lexicon(path: Path, tokens: list[str], separator: str) -> str:
    """Check a user lexicon (word, then its spelling in tokens) and return its text."""
    if not path.is_file():
        raise DecoderError(f"{path}: lexicon file not found")
    known = set(tokens[1:])
    lines = []
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            fields = line.split()
            if not fields:
                continue
            if len(fields) < 2:
                raise DecoderError(f"{path} line {number}: expected a word and its spelling")
            bad = [t for t in fields[1:] if t not in known]
            if bad:
                raise DecoderError(
                    f"{path} line {number}: spelling of {fields[0]!r} uses {', '.join(bad)}, "
                    f"not in the model's tokens ({' '.join(tokens[1:])}; {separator!r} "
                    "separates words)")
            lines.append(f"{fields[0]}\t{' '.join(fields[1:])}\n")
    if not lines:
        raise DecoderError(f"{path}: lexicon is empty")
    return "".join(lines)


class BeamSearchDecoder:
    """Beam search over CTC log-probs, with the LM and lexicon of a ``DecodeConfig``."""

    def __init__(self, vocabulary: Vocabulary, config: DecodeConfig,
                 _resources: _Resources | None = None) -> None:
        # Settings made in code (decode tune's grid, dataclasses.replace) skip the config
        # file's checks: the same bounds hold here, so no path runs an unbounded beam.
        def refuse(key: str, message: str) -> NoReturn:
            raise DecoderError(f"decode.{key}: {message}")

        config.check(refuse)
        self.vocabulary = vocabulary
        self.config = config
        self._resources = _resources or _Resources.load(vocabulary, config)
        self._decoder = self._resources.build(config)
        self._separator = self._resources.tokens.index(self._resources.separator)
        log.debug("beam search decoder: %s, beam %d, lm_weight %g, word_bonus %g",
                  self.mode, config.beam, config.lm_weight, config.word_bonus)

    @property
    def mode(self) -> str:
        """"lexicon", "lexicon-free + character LM" or "lexicon-free"."""
        return self._resources.mode

    def with_weights(self, lm_weight: float, word_bonus: float) -> BeamSearchDecoder:
        """A decoder with other weights that shares this one's loaded LM and lexicon."""
        config = dataclasses.replace(self.config, lm_weight=lm_weight, word_bonus=word_bonus)
        return BeamSearchDecoder(self.vocabulary, config, self._resources)

    def _emissions(self, log_probs: torch.Tensor, lengths: torch.Tensor | Sequence[int] | None
                   ) -> tuple[torch.Tensor, torch.Tensor]:
        if log_probs.dim() != 3 or log_probs.shape[2] != len(self.vocabulary):
            raise ValueError(f"expected [batch, frames, {len(self.vocabulary)}] log-probs, "
                             f"got {tuple(log_probs.shape)}")
        batch, frames, classes = log_probs.shape
        emissions = log_probs.detach().to("cpu", torch.float32)
        if lengths is None:
            lengths = torch.full((batch,), frames, dtype=torch.long)
        lengths = torch.as_tensor(lengths, dtype=torch.long).cpu().clamp(0, frames)
        if self.mode != "lexicon":
            return emissions.contiguous(), lengths
        # One more frame per utterance, right after its last one, that only the word
        # separator can take: the last word ends like the others.
        padded = torch.full((batch, frames + 1, classes), _IMPOSSIBLE)
        padded[:, :, self._separator] = 0.0
        valid = torch.arange(frames)[None, :] < lengths[:, None]
        padded[:, :frames][valid] = emissions[valid]
        return padded, lengths + 1

    def _beams(self, log_probs: torch.Tensor,
               lengths: torch.Tensor | Sequence[int] | None) -> list[list[Any]]:
        """Each utterance's final beam, best hypothesis first."""
        emissions, lengths = self._emissions(log_probs, lengths)
        return self._decoder(emissions, lengths)

    def _text(self, hypothesis: Any) -> str:
        if hypothesis is None:
            return ""
        if self.mode == "lexicon":
            return " ".join(hypothesis.words)
        text = self.vocabulary.decode(hypothesis.tokens.tolist())
        return " ".join(w for w in text.split(" ") if w)

    def decode(self, log_probs: torch.Tensor,
               lengths: torch.Tensor | Sequence[int] | None = None) -> list[str]:
        """Texts from ``[batch, frames, classes]`` log-probs (log_softmax) and valid lengths."""
        return [self._text(hyps[0] if hyps else None) for hyps in self._beams(log_probs, lengths)]

    def decode_words(self, log_probs: torch.Tensor,
                     lengths: torch.Tensor | Sequence[int] | None = None
                     ) -> list[tuple[str, list[WordSegment]]]:
        """Text and words (frame spans, confidences) of each utterance of ``[batch, frames,
        classes]`` log-probs, from one search.

        A word's confidence is its posterior in the final beam: the share of the beam's
        probability (each hypothesis's score, acoustics + LM + bonus, softmax-normalized)
        held by the hypotheses that also have this word over frames that overlap its own.
        Scoring the best path's own tokens, as greedy words are scored, fails here: a
        letter that the LM rightly supplied, unheard, would sink a right word. On AN4 dev
        (``decode.yaml`` of the recipe, 26 wrong words of 514) this ROC AUC was 0.88
        against 0.83 for the tokens' posteriors (``deepspeech.decoding.confidence``).
        """
        beams = self._beams(log_probs, lengths)  # checks the shapes
        frames = log_probs.shape[1]
        lengths = [frames] * len(beams) if lengths is None else lengths
        lengths = torch.as_tensor(lengths, dtype=torch.long).cpu().clamp(0, frames).tolist()
        return [(self._text(hyps[0] if hyps else None), self._confident_words(hyps, length))
                for hyps, length in zip(beams, lengths, strict=True)]

    def word_segments(self, log_probs: torch.Tensor,
                      length: int | None = None) -> list[WordSegment]:
        """Best words of one utterance (``[frames, classes]``) with their frame spans and
        confidences."""
        lengths = None if length is None else [length]
        return self.decode_words(log_probs.unsqueeze(0), lengths)[0][1]

    def _confident_words(self, hypotheses: list[Any], frames: int) -> list[WordSegment]:
        """The best hypothesis's words, each with its posterior in the beam."""
        if not hypotheses:
            return []
        scores = torch.tensor([h.score for h in hypotheses], dtype=torch.float64)
        posteriors = torch.softmax(scores, dim=0).tolist()
        # Each hypothesis's words by spelling: the spans where it says them.
        said: list[dict[str, list[tuple[int, int]]]] = []
        for hypothesis in hypotheses:
            spans: dict[str, list[tuple[int, int]]] = {}
            for word, start, end in self._spans(hypothesis, frames):
                spans.setdefault(word, []).append((start, end))
            said.append(spans)
        return [WordSegment(word, start, end, min(1.0, sum(
                    posterior for posterior, spans in zip(posteriors, said, strict=True)
                    if any(s < end and start < e for s, e in spans.get(word, ())))))
                for word, start, end in self._spans(hypotheses[0], frames)]

    def _spans(self, hypothesis: Any, frames: int) -> list[tuple[str, int, int]]:
        """The words of a hypothesis over ``frames`` frames, with their frame spans.

        Flashlight reports the frame where each token starts; a word ends one frame
        after the start of its last character (greedy spans also cover repeats).
        """
        spans: list[tuple[str, int, int]] = []
        word: list[str] = []
        start = end = 0
        # Flashlight's path starts with the state before the first frame: the token at
        # path position i was emitted at frame i - 1.
        for token, position in zip(hypothesis.tokens.tolist(), hypothesis.timesteps.tolist(),
                                   strict=True):
            frame = position - 1
            if token == self._separator or not 0 <= frame < frames:
                if word:
                    spans.append(("".join(word), start, end))
                    word = []
                continue
            if token == self.vocabulary.blank:
                continue
            if not word:
                start = frame
            word.append(self.vocabulary.characters[token - 1])
            end = frame + 1
            if self._separator == self.vocabulary.blank:
                spans.append(("".join(word), start, end))
                word = []
        if word:
            spans.append(("".join(word), start, end))
        return spans
