"""``deepspeech bench``: benchmarks that print their figures (never timed tests).

One module per benchmark (``allreduce``, ``train``, ``data``, ``decode``), each with
``add_arguments(parser)`` and ``run(args)``; ``deepspeech.cli.bench`` imports only the
one chosen, so that MPI or the decoders load only for their benchmark. The figures
and the commands behind them are recorded in docs/BENCHMARKS.md.
"""
