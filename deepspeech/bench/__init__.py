"""``deepspeech bench``: benchmarks that print their figures (never timed tests).

One module per benchmark (``allreduce``, ``train``, ``data``, ``decode``, ``ctc``,
``batching``, ``memory``, ``package``, ``serve``), each with ``add_arguments(parser)`` and
``run(args)``; ``deepspeech.cli.bench`` imports only the one chosen, so that MPI, Triton or
the decoders load only for their benchmark. To add one: a module here and a line in
``deepspeech.cli.bench.BENCHMARKS``. The figures and the commands behind them are recorded
in docs/BENCHMARKS.md.
"""
