"""deepspeech bench train: figures counted from the model's shapes, in a chosen precision,
and where a profiled step's time goes."""

from __future__ import annotations

import json

import pytest
import torch

from deepspeech.bench import profile
from deepspeech.bench.train import bench_config
from deepspeech.cli import main

TINY = """
features: {kind: mel, n_mels: 20}
model:
  conv: {channels: [4], kernels: [[11, 5]], strides: [[2, 2]]}
  rnn: {layers: 1, hidden: 16}
execution: {precision: bf16}
"""


@pytest.mark.slow  # measures a matmul peak first
def test_bench_train_prints_throughput_and_fraction_of_peak(tmp_path, capsys):
    config = tmp_path / "tiny.yaml"
    config.write_text(TINY)
    status = main(["bench", "train", "--configs", str(config), "--batch-size", "2",
                   "--seconds", "1", "--steps", "2", "--threads", "1", "--precision", "fp32",
                   "--json"])
    assert status == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["precision"] == "fp32" and result["batch_size"] == 2
    assert result["parameters"] > 0 and result["gflop_per_step"] > 0
    assert result["audio_seconds_per_second"] > 0
    assert 0 < result["fraction_of_peak"] < 1


@pytest.mark.slow  # measures a matmul peak first
def test_bench_train_applies_overrides_to_the_config(tmp_path, capsys):
    config = tmp_path / "tiny.yaml"
    config.write_text(TINY)
    arguments = ["bench", "train", "--configs", str(config), "--batch-size", "2", "--seconds",
                 "1", "--steps", "1", "--threads", "1", "--precision", "fp32", "--json"]
    assert main(arguments) == 0
    gru = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert main([*arguments, "--set", "model.rnn.kind=lstm", "model.rnn.hidden=24"]) == 0
    lstm = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert lstm["overrides"][:2] == ["model.rnn.kind=lstm", "model.rnn.hidden=24"]
    # 4 gates of 24 against 3 of 16: more weights and more work per step
    assert lstm["parameters"] > gru["parameters"]
    assert lstm["gflop_per_step"] > gru["gflop_per_step"]
    assert main([*arguments, "--set", "model.rnn.kind=transformer"]) != 0
    assert "(with overrides): model.rnn.kind: must be one of" in capsys.readouterr().err


# Two biLSTM layers, the second with batch norm, as the quickstart model, in miniature.
PROFILED = """
features: {kind: mel, n_mels: 20}
model:
  conv: {channels: [4], kernels: [[11, 5]], strides: [[2, 2]]}
  rnn: {kind: lstm, layers: 2, hidden: 16, bidirectional: true, batch_norm: true}
"""
MODEL_LAYERS = ("conv", "rnns.0", "rnns.1", "output")


@pytest.fixture(scope="module")
def profiled(tmp_path_factory) -> tuple[profile.StepProfile, list]:
    """A profiled CPU step of the tiny model, and the profiler's events it was read from."""
    config = tmp_path_factory.mktemp("profile") / "tiny.yaml"
    config.write_text(PROFILED)
    events = []

    def keep_events(found, on_device):
        events.extend(found)
        return attribute(events, on_device)

    attribute = profile.attribute
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(profile, "attribute", keep_events)
        result = bench_config(str(config), batch_size=2, seconds=1.0, steps=1, threads=1,
                              profile=True, precision="fp32", device=torch.device("cpu"))
    return result["profile"], events


def test_profile_groups_add_up_to_the_step(profiled):
    step, events = profiled
    assert step.step_ms == step.wall_ms > 0
    assert step.attributed_ms + step.unattributed_ms == pytest.approx(step.step_ms)
    # Counted apart from the attribution: the operators that no other operator calls,
    # whole, within the step's scopes. Each microsecond charged once, none lost.
    phases = [e for e in events if e.name in (profile.LOSS_SCOPE, profile.UPDATE_SCOPE)]
    start, end = min(e.time_range.start for e in phases), max(e.time_range.end for e in phases)

    def outermost(event):
        parent = event.cpu_parent
        while parent is not None and parent.is_user_annotation:
            parent = parent.cpu_parent
        return parent is None

    operators = [e for e in events if e.device_type.name == "CPU" and not e.is_user_annotation
                 and start <= e.time_range.start < end and outermost(e)]
    assert step.attributed_ms == pytest.approx(sum(e.cpu_time_total for e in operators) / 1e3,
                                               rel=1e-6)
    assert 0 < step.unattributed_ms < step.step_ms  # host time between operators
    numbers = step.to_dict()
    assert sum(numbers["by_layer"].values()) == pytest.approx(step.attributed_ms, abs=0.05)
    assert sum(numbers["by_kind"].values()) == pytest.approx(step.attributed_ms, abs=0.05)
    table = step.table()
    assert all(f"  {layer} " in table for layer in numbers["by_layer"])
    assert "unattributed" in table.splitlines()[-1]


def test_profile_charges_each_layer_its_own_work_forward_and_backward(profiled):
    step, _ = profiled
    assert set(MODEL_LAYERS) | {"ctc loss", "optimizer"} <= set(step.by_layer())
    kinds = {layer: {kind for (name, kind) in step.groups if name == layer}
             for layer in step.by_layer()}
    assert [layer for layer in kinds if "convolution" in kinds[layer]] == ["conv"]
    assert sorted(layer for layer in kinds if "recurrence" in kinds[layer]) == ["rnns.0", "rnns.1"]
    assert [layer for layer in kinds if "ctc" in kinds[layer]] == ["ctc loss"]
    # The masked norm after the convolution and the sequence-wise norm of the second RNN
    # (the first has none), with their backward passes.
    assert sorted(layer for layer in kinds if "normalization" in kinds[layer]) == ["conv", "rnns.1"]
    # Backward operators reach the layers whose forward operators created their nodes.
    for layer in (*MODEL_LAYERS, "ctc loss"):
        assert step.backward[layer] > 0, layer
    assert "optimizer" not in step.backward
    assert sum(step.backward[layer] for layer in MODEL_LAYERS) > 5 * step.backward.get("other", 0)


@pytest.mark.parametrize(("name", "kind"), [
    ("aten::mkldnn_rnn_layer", "recurrence"),
    ("autograd::engine::evaluate_function: MkldnnRnnLayerBackward0", "recurrence"),
    ("aten::_thnn_fused_gru_cell", "recurrence"),
    ("RNN_blockPersist_fp_LSTM<float>", "recurrence"),
    ("gru_backward_steps", "recurrence"),
    ("aten::convolution_backward", "convolution"),
    ("sm90_xmma_fprop_implicit_gemm_tf32f32_tf32f32_f32", "convolution"),
    ("aten::addmm", "gemm"),
    ("MmBackward0", "gemm"),
    ("nvjet_tst_128x64_64x4_1x2_h_bz_NNT", "gemm"),
    ("aten::native_batch_norm_backward", "normalization"),
    ("cudnn::bn_fw_tr_1C11_kernel_NCHW", "normalization"),
    ("aten::sum", "reduction"),
    ("aten::_log_softmax", "reduction"),
    ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float>>", "reduction"),
    ("aten::masked_fill_", "elementwise"),
    ("aten::_to_copy", "elementwise"),
    ("aten::t", "elementwise"),
    ("aten::clamp_min", "elementwise"),
    ("void at::native::vectorized_elementwise_kernel<4, CUDAFunctor_add<float>>", "elementwise"),
    ("aten::_ctc_loss", "ctc"),
    ("alpha_kernel", "ctc"),
    ("aten::_fused_adamw_", "optimizer"),
    ("ncclDevKernel_AllReduce_Sum_f32_RING_LL", "communication"),
    ("aten::empty_strided", "other"),
])
def test_classify_names_the_kind_of_work(name, kind):
    assert profile.classify(name) == kind
