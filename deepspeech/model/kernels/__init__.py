"""The project's GPU kernels, in Triton, apart from the model that uses them.

Each kernel comes as two modules: ``*_triton.py`` holds the ``@triton.jit`` code, and the
module beside it its autograd function and the entry point the model calls. On a CPU the
tests run the same kernels in Triton's interpreter.

* ``ctc``, ``ctc_triton``: the CTC loss, bitwise reproducible (``model.ctc_loss`` picks it
  for CUDA tensors);
* ``gru``, ``gru_triton``: the persistent GRU recurrence (``execution.rnn_kernel: persistent``);
* ``batch_norm``, ``batch_norm_triton``: training batch norm over the valid frames
  (``execution.batch_norm: fused``).
"""
