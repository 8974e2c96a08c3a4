"""Decoding CTC outputs into text: greedy, or beam search with an n-gram LM.

``greedy_decode`` and ``greedy_word_segments`` need nothing but torch.
``BeamSearchDecoder`` wraps flashlight's decoder (through torchaudio) with a
lexicon and a KenLM-readable ARPA model (see ``deepspeech.lm`` to build one);
``tune_decoder`` searches its LM weight and word bonus on a dev set.
"""

from deepspeech.decoding.beam import BeamSearchDecoder, DecoderError
from deepspeech.decoding.greedy import WordSegment, greedy_decode, greedy_word_segments
from deepspeech.decoding.tune import TunePoint, TuneResult, tune_decoder

__all__ = [
    "BeamSearchDecoder", "DecoderError", "TunePoint", "TuneResult", "WordSegment",
    "greedy_decode", "greedy_word_segments", "tune_decoder",
]
