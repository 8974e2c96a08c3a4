"""deepspeech: Deep Speech 2 training, evaluation and serving, deterministic, on MPI.

The import name is ``deepspeech`` but the distribution is ``deepspeech2``: PyPI's
``deepspeech`` is Mozilla's archived DeepSpeech (inference only), so a
``pip install deepspeech`` would bring another program.
"""

DISTRIBUTION = "deepspeech2"
