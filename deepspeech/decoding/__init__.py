"""Decoding CTC outputs into text: greedy, or beam search with an n-gram LM.

``greedy`` needs nothing but torch. ``beam`` wraps flashlight's decoder (through
torchaudio) with a lexicon and a KenLM-readable ARPA model (see ``deepspeech.lm``
to build one); it is imported only where beam search is used, so that greedy
decoding and training do not load flashlight and the LM code.
``deepspeech.evaluation.decoder_tuning`` searches its LM weight and word bonus on a
dev set.
"""
