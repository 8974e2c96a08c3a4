"""Evaluation: CER/WER with jiwer over any manifest, per-utterance reports."""
