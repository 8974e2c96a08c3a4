"""A trained model at work: rebuilt from its checkpoint (``recognizer``), transcribing
files (``transcribe``), streaming (``streaming``) and exported for other runtimes
(``export``). Nothing below this package imports it: training knows nothing of inference."""
