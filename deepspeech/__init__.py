"""deepspeech."""
