"""A trained model at work: rebuilt from its checkpoint or package (``recognizer``,
``package``), transcribing files (``transcribe``), streaming (``streaming``), exported
for other runtimes (``export``) and served over HTTP and WebSocket (``server``, its
streams ``live``, its ``limits`` and the page in ``static/``). Nothing below this package
imports it: training knows nothing of inference."""
