"""The parts of ``scripts/fault_drill.py``, by the drill's own sections.

``inputs`` (broken audio files and manifest lines), ``jobs`` (commands run in their
own session with a time bound), ``verdicts`` (judging what a command said, the table),
``workspace`` (the drill's folder, mounts, shared corpora and runs), ``loopback`` (a
server on loopback and the clients that attack it), and the cases: ``bad_input``,
``interruptions`` and ``hostile``.
"""
