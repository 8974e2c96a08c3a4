"""The recurrence implementations that ``execution.rnn_kernel`` chooses from.

This table is the one place an RNN implementation is chosen. An entry builds one
direction of one recurrent layer: a module called as a batch-first ``torch.nn.GRU`` or
``torch.nn.LSTM`` is, ``rnn(x [B, T, D], state) -> (y [B, T, H], state)``, that holds
the same parameters under the same names and creates them in the same order
(``weight_ih_l0``, ``weight_hh_l0``, ``bias_ih_l0``, ``bias_hh_l0``, initialized as
torch does). So checkpoints and packages load whatever kernel trained them, and a
seeded model starts from the same weights under every kernel.

A kernel keeps the determinism contract: the same inputs give the same bits.

To add one: write its builder here, add it to ``RNN_KERNELS`` and its name to
``ExecutionConfig.rnn_kernel`` in ``deepspeech/config.py`` (a test checks that the two agree).
"""

from __future__ import annotations

from collections.abc import Callable

from torch import nn

from deepspeech.model.kernels.gru import PersistentGRU


def torch_rnn(kind: str, input_size: int, hidden: int) -> nn.Module:
    """``torch.nn.GRU``/``LSTM``: cuDNN on a GPU, oneDNN or ATen's own loop on the CPU."""
    return {"gru": nn.GRU, "lstm": nn.LSTM}[kind](input_size, hidden, batch_first=True)


def persistent_rnn(kind: str, input_size: int, hidden: int) -> nn.Module:
    """The project's persistent recurrence (Triton): one launch per pass over all time steps."""
    if kind != "gru":  # RNNConfig.check refuses it in a config
        raise ValueError(f"the persistent kernel runs GRUs only, not {kind}")
    return PersistentGRU(input_size, hidden)


RNN_KERNELS: dict[str, Callable[[str, int, int], nn.Module]] = {
    "torch": torch_rnn,
    "persistent": persistent_rnn,
}
"""``execution.rnn_kernel`` -> builder ``(kind, input_size, hidden) -> module``."""
