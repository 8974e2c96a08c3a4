"""``python -m deepspeech`` is the ``deepspeech`` command."""

from deepspeech.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
