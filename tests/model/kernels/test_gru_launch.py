"""How the persistent GRU launches a pass: one cooperative launch with grid barriers only
where CUDA guarantees every program resident, and CUDA's refusal said in the config's words.
Pure decisions, run without a GPU."""

from __future__ import annotations

import pytest
import torch

from deepspeech.model.kernels import gru as pg

REFUSAL = RuntimeError("Triton Error [CUDA]: too many blocks in cooperative launch")


@pytest.mark.parametrize("on_cuda, fits, cooperative, why_not", [
    (True, True, True, None),
    (True, False, True, "more programs than SMs"),
    (True, True, False, "cannot launch a grid cooperatively"),  # a shared GPU could hang
    (False, True, True, "interpreter"),
])
def test_a_grid_barrier_needs_a_cuda_grid_that_fits_and_a_cooperative_launch(
        on_cuda: bool, fits: bool, cooperative: bool, why_not: str | None) -> None:
    reason = pg.grid_barrier_launch(on_cuda, fits, cooperative)
    if why_not is None:
        assert reason is None
    else:
        assert why_not in reason


def test_the_installed_triton_launches_cooperatively() -> None:
    pytest.importorskip("triton")
    assert pg._cooperative_launches()


def test_cpu_passes_are_one_launch_per_step_and_say_why() -> None:
    device = torch.device("cpu")
    assert not pg._chosen_launch(96, 200, device)
    assert pg.describe_launch(96, 200, device).endswith(
        "one launch per step (Triton's interpreter runs programs one after another)")


def test_a_refused_cooperative_launch_names_the_key_and_the_way_out() -> None:
    plan = pg._Plan(96, 200, programs=132)
    seen: dict = {}

    def refused(*args, **kwargs):
        seen.update(kwargs)
        raise REFUSAL

    with pytest.raises(pg.GridNotResident) as caught:
        pg._launch_whole_pass(refused, plan, torch.device("cuda", 1), 1, 2, GRID_BARRIER=True)
    assert seen == {"launch_cooperative_grid": True, "GRID_BARRIER": True}
    message = str(caught.value)
    assert message.startswith("execution.rnn_kernel=persistent: CUDA refused to run the GRU "
                              "recurrence's 26 programs at once on cuda:1")
    assert "set execution.rnn_kernel: torch" in message
    assert caught.value.__cause__ is REFUSAL


def test_other_launch_errors_pass_unchanged() -> None:
    other = RuntimeError("Triton Error [CUDA]: an illegal memory access was encountered")

    def broken(*args, **kwargs):
        raise other

    with pytest.raises(RuntimeError) as caught:
        pg._launch_whole_pass(broken, pg._Plan(3, 20, programs=4), torch.device("cuda", 0))
    assert caught.value is other
    assert pg.not_resident(other, (2, 1), torch.device("cuda", 0)) is None
