"""``python -m deepspeech`` is the ``deepspeech`` command."""

from deepspeech.cli import main

raise SystemExit(main())
