"""DeepSpeech2: shapes, padding invariance, streaming, tracing, counts, CTC and determinism."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from deepspeech.config import ConvConfig, ModelConfig, RNNConfig, load_config
from deepspeech.model import (
    DeepSpeech2,
    count_parameters,
    flops_per_second_of_audio,
    forward_flops,
    training_flops,
)
from deepspeech.model.layers import (
    MaskedBatchNorm2d,
    SequenceLayer,
    future_frames,
    time_stride,
)
from deepspeech.model.traceable import TraceableDeepSpeech2

CONFIGS = Path(__file__).parents[2] / "configs"
BINS = 41
CLASSES = 29
TOL = {"atol": 1e-5, "rtol": 1e-5}

VARIANTS = {
    "gru-bi": RNNConfig(kind="gru", layers=3, hidden=24, bidirectional=True),
    "lstm-bi": RNNConfig(kind="lstm", layers=2, hidden=24, bidirectional=True),
    "gru-lookahead": RNNConfig(kind="gru", layers=2, hidden=24, bidirectional=False,
                               lookahead=3),
    "lstm-lookahead": RNNConfig(kind="lstm", layers=3, hidden=24, bidirectional=False,
                                lookahead=2),
}


def small_config(rnn: RNNConfig, fc_hidden: int = 16, dropout: float = 0.0,
                 conv: ConvConfig | None = None) -> ModelConfig:
    conv = conv or ConvConfig(channels=[4, 6], kernels=[[11, 11], [5, 11]],
                              strides=[[2, 2], [2, 1]])
    return ModelConfig(conv=conv, rnn=rnn, fc_hidden=fc_hidden, dropout=dropout)


def build(config: ModelConfig, seed: int = 0, bins: int = BINS) -> DeepSpeech2:
    torch.manual_seed(seed)
    model = DeepSpeech2(config, bins, CLASSES)
    # Non-trivial running statistics, so that eval mode's batch norm does something.
    with torch.no_grad():
        for name, buffer in model.named_buffers():
            if name.endswith("running_mean"):
                buffer.uniform_(-0.5, 0.5)
            elif name.endswith("running_var"):
                buffer.uniform_(0.5, 2.0)
    return model


def padded_batch(lengths: list[int], bins: int = BINS, extra: int = 0, garbage: bool = True,
                 seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Random features; frames past each length hold garbage (the model must ignore it)."""
    generator = torch.Generator().manual_seed(seed)
    features = torch.full((len(lengths), bins, max(lengths) + extra), 100.0 * garbage)
    for i, n in enumerate(lengths):
        features[i, :, :n] = torch.randn(bins, n, generator=generator)
    if garbage and extra:
        features[0, :, -1] = float("nan")
    return features, torch.tensor(lengths)


@pytest.fixture
def deterministic():
    before = torch.are_deterministic_algorithms_enabled()
    threads = torch.get_num_threads()
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(2)
    yield
    torch.use_deterministic_algorithms(before)
    torch.set_num_threads(threads)


CONVS = [
    ConvConfig(channels=[3], kernels=[[5, 3]], strides=[[2, 1]]),
    ConvConfig(channels=[3, 3], kernels=[[11, 11], [5, 11]], strides=[[2, 2], [2, 1]]),
    ConvConfig(channels=[2, 2, 2], kernels=[[3, 4], [3, 5], [1, 2]], strides=[[1, 3], [2, 2],
                                                                              [1, 1]]),
    ConvConfig(channels=[2, 2], kernels=[[7, 6], [3, 1]], strides=[[3, 4], [1, 3]]),
]


@pytest.mark.parametrize("conv", CONVS, ids=range(len(CONVS)))
def test_output_lengths_agree_with_forward(conv: ConvConfig) -> None:
    rnn = RNNConfig(layers=1, hidden=8, bidirectional=False, lookahead=1)
    model = build(small_config(rnn, fc_hidden=0, conv=conv)).eval()
    lengths = torch.arange(1, 41)
    expected = lengths.clone()
    for (_, kt), (_, st) in zip(conv.kernels, conv.strides, strict=True):
        expected = (expected + 2 * (kt // 2) - kt) // st + 1
    assert torch.equal(model.output_lengths(lengths), expected)
    assert int(expected.min()) >= 1
    # Streaming agrees with the offline lengths even for strides longer than kernels.
    with torch.no_grad():
        for n in (1, 2, 9, 40):
            features = torch.randn(1, BINS, n)
            offline, _ = model(features, torch.tensor([n]))
            state, pieces = None, []
            for start in range(0, n, 2):
                piece, state = model.stream_step(features[:, :, start:start + 2], state)
                pieces.append(piece)
            pieces.append(model.stream_step(features[:, :, :0], state, final=True)[0])
            torch.testing.assert_close(torch.cat(pieces, dim=1), offline, **TOL)
    with torch.no_grad():
        for n in lengths.tolist():
            log_probs, out = model(torch.randn(1, BINS, n), torch.tensor([n]))
            assert log_probs.shape == (1, int(expected[n - 1]), CLASSES)
            assert out.tolist() == [int(expected[n - 1])]
        features, lengths = padded_batch(lengths.tolist())
        log_probs, out = model(features, lengths)
    assert torch.equal(out, expected)
    assert log_probs.shape == (40, int(expected.max()), CLASSES)
    assert log_probs.dtype == torch.float32
    # Valid frames are distributions; frames past the end are zero-filled.
    assert torch.allclose(log_probs[0, :out[0]].exp().sum(-1), torch.ones(int(out[0])))
    assert torch.all(log_probs[0, out[0]:] == 0)


@pytest.mark.parametrize("conv", CONVS, ids=range(len(CONVS)))
def test_time_stride_and_future_frames_say_when_an_output_frame_is_final(
        conv: ConvConfig) -> None:
    lookahead = 2
    rnn = RNNConfig(layers=1, hidden=8, bidirectional=False, lookahead=lookahead)
    model = build(small_config(rnn, fc_hidden=0, conv=conv)).eval()
    stride, future = time_stride(conv), future_frames(conv)
    assert model.time_stride == stride
    with torch.no_grad():
        lengths = torch.arange(1, 200)
        # One more output frame every `stride` input frames.
        assert torch.equal(model.output_lengths(lengths + stride),
                           model.output_lengths(lengths) + 1)
        for n in range(1, 41):
            out, _ = model.stream_step(torch.randn(1, BINS, n))
            # Conv frame m is complete once input frame m * stride + future has arrived;
            # output frame j waits for conv frame j + lookahead.
            conv_frames = (n - 1 - future) // stride + 1 if n > future else 0
            assert out.shape[1] == max(conv_frames - lookahead, 0)


@pytest.mark.parametrize("variant", VARIANTS)
def test_padding_invariance_eval(variant: str) -> None:
    model = build(small_config(VARIANTS[variant])).eval()
    lengths = [57, 23, 40]
    features, lengths_t = padded_batch(lengths, extra=5)
    with torch.no_grad():
        batch, out = model(features, lengths_t)
        for i, n in enumerate(lengths):
            alone, alone_out = model(features[i:i + 1, :, :n], lengths_t[i:i + 1])
            assert int(alone_out) == int(out[i])
            torch.testing.assert_close(batch[i, :out[i]], alone[0], **TOL)


def test_masked_batch_norm_uses_valid_frames_only() -> None:
    torch.manual_seed(0)
    x = torch.randn(3, 4, 5, 9, requires_grad=True)
    lengths = torch.tensor([9, 4, 6])
    mask = torch.arange(9)[None, :] < lengths[:, None]
    masked = MaskedBatchNorm2d(4).train()
    reference = torch.nn.BatchNorm2d(4).train()
    # Reference: the valid frames alone, side by side as one utterance.
    valid = torch.cat([x[i, :, :, :n] for i, n in enumerate(lengths.tolist())], dim=-1)
    expected = reference(valid[None])[0]
    y = masked(x, mask)
    got = torch.cat([y[i, :, :, :n] for i, n in enumerate(lengths.tolist())], dim=-1)
    torch.testing.assert_close(got, expected, **TOL)
    torch.testing.assert_close(masked.running_mean, reference.running_mean, **TOL)
    torch.testing.assert_close(masked.running_var, reference.running_var, **TOL)
    # Padded frames get no gradient through the statistics either.
    (y * mask[:, None, None, :]).square().sum().backward()
    assert torch.all(x.grad[1, :, :, 4:] == 0)


@pytest.mark.parametrize("variant", ["gru-bi", "lstm-lookahead"])
def test_train_mode_statistics_ignore_padding(variant: str) -> None:
    config = small_config(VARIANTS[variant])
    lengths = [50, 31, 12]
    results = []
    for extra, garbage in ((0, False), (17, True)):
        model = build(config).train()
        seen = []
        model.rnns[1].norm.register_forward_hook(lambda m, i, o, s=seen: s.append(i[0].shape[0]))
        features, lengths_t = padded_batch(lengths, extra=extra, garbage=garbage)
        log_probs, out = model(features, lengths_t)
        # Sequence-wise batch norm saw exactly the valid frames.
        assert seen == [int(out.sum())]
        valid = [log_probs[i, :n] for i, n in enumerate(out.tolist())]
        stats = {k: v for k, v in model.state_dict().items() if "running" in k}
        results.append((valid, stats))
    (valid_a, stats_a), (valid_b, stats_b) = results
    for a, b in zip(valid_a, valid_b, strict=True):
        torch.testing.assert_close(a, b, **TOL)
    for key in stats_a:
        torch.testing.assert_close(stats_a[key], stats_b[key], **TOL)


@pytest.mark.parametrize("variant", ["gru-lookahead", "lstm-lookahead", "gru-uni"])
@pytest.mark.parametrize("chunks", [[1], [7], [64], [0, 3, 10, 1, 0, 5]], ids=str)
def test_streaming_equals_offline(variant: str, chunks: list[int]) -> None:
    rnn = VARIANTS.get(variant) or RNNConfig(layers=2, hidden=24, bidirectional=False)
    model = build(small_config(rnn)).eval()
    frames = 53
    features = torch.randn(2, BINS, frames)
    with torch.no_grad():
        offline, out = model(features, torch.tensor([frames, frames]))
    pieces, state, start, i = [], None, 0, 0
    while start < frames:
        size = chunks[i % len(chunks)]
        log_probs, state = model.stream_step(features[:, :, start:start + size], state)
        pieces.append(log_probs)
        start, i = start + size, i + 1
    log_probs, state = model.stream_step(features[:, :, frames:], state, final=True)
    pieces.append(log_probs)
    streamed = torch.cat(pieces, dim=1)
    assert streamed.shape == offline.shape == (2, int(out[0]), CLASSES)
    assert state.frames_in == frames and state.frames_out == int(out[0])
    torch.testing.assert_close(streamed, offline, **TOL)
    with pytest.raises(RuntimeError, match="finished"):
        model.stream_step(features, state)


def test_streaming_refuses_bidirectional_and_train_mode() -> None:
    model = build(small_config(VARIANTS["gru-bi"])).eval()
    with pytest.raises(ValueError, match="unidirectional"):
        model.stream_step(torch.randn(1, BINS, 10))
    model = build(small_config(VARIANTS["gru-lookahead"])).train()
    with pytest.raises(RuntimeError, match="eval"):
        model.stream_step(torch.randn(1, BINS, 10))


TRACEABLE = {
    **{name: small_config(rnn) for name, rnn in VARIANTS.items()},
    "lstm-uni-nobn-nofc": small_config(RNNConfig(kind="lstm", layers=1, hidden=24,
                                                 bidirectional=False, batch_norm=False),
                                       fc_hidden=0, dropout=0.3, conv=CONVS[3]),
}


@pytest.mark.parametrize("variant", TRACEABLE)
def test_traceable_forward_equals_forward_on_padded_batches(variant: str) -> None:
    model = build(TRACEABLE[variant]).eval()
    traceable = TraceableDeepSpeech2(model)
    features, lengths = padded_batch([97, 40, 13, 66], extra=3)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", category=torch.jit.TracerWarning)
        warnings.simplefilter("ignore", category=DeprecationWarning)
        expected, expected_lengths = model(features, lengths)
        got, got_lengths = traceable(features, lengths)
        # Traced on another batch size and length, it still computes the same.
        traced = torch.jit.trace(traceable, padded_batch([64, 41], seed=2), check_trace=False)
        traced_out, traced_lengths = traced(features, lengths)
    assert torch.equal(got_lengths, expected_lengths)
    assert torch.equal(traced_lengths, expected_lengths)
    torch.testing.assert_close(got, expected, **TOL)
    assert torch.equal(traced_out, got)


def test_traceable_refuses_train_mode() -> None:
    with pytest.raises(ValueError, match="eval-mode"):
        TraceableDeepSpeech2(build(small_config(VARIANTS["gru-bi"])).train())


def test_bad_input_is_named() -> None:
    model = build(small_config(VARIANTS["gru-bi"]))
    with pytest.raises(ValueError, match="41 bins"):
        model(torch.randn(2, 40, 10), torch.tensor([10, 10]))
    with pytest.raises(ValueError, match="lengths"):
        model(torch.randn(2, BINS, 10), torch.tensor([11, 10]))


def gru_parameters(inputs: int, hidden: int) -> int:
    return 3 * (inputs * hidden + hidden * hidden + 2 * hidden)


def test_parameter_counts() -> None:
    # Default config with 161 linear bins: 41x11 and 21x11 convs -> 32 x 41 = 1312
    # features per frame, 3 bidirectional GRU layers of 256, 29 characters.
    conv = 32 * 41 * 11 + 64 + 32 * 32 * 21 * 11 + 64
    rnn = 2 * gru_parameters(1312, 256) + 2 * (2 * 256 + 2 * gru_parameters(256, 256))
    expected = conv + rnn + 256 * 29 + 29
    assert count_parameters(DeepSpeech2(ModelConfig(), 161, 29)) == expected == 4_250_109
    # Deep Speech 2 size: 5 bidirectional GRU layers of 800.
    ds2 = ModelConfig(rnn=RNNConfig(layers=5, hidden=800))
    rnn = 2 * gru_parameters(1312, 800) + 4 * (2 * 800 + 2 * gru_parameters(800, 800))
    expected = conv + rnn + 800 * 29 + 29
    assert count_parameters(DeepSpeech2(ds2, 161, 29)) == expected == 41_186_333


def test_flops_from_layer_shapes() -> None:
    config = ModelConfig(conv=ConvConfig(channels=[2], kernels=[[3, 3]], strides=[[2, 2]]),
                         rnn=RNNConfig(kind="lstm", layers=2, hidden=4, bidirectional=False,
                                       lookahead=2), fc_hidden=5)
    model = DeepSpeech2(config, 9, 7)
    # 9 bins -> 5, 10 frames -> 5; 2 channels x 5 bins = 10 features per frame.
    conv = 2 * 1 * 2 * 3 * 3 * 5 * 5
    rnn = 5 * (2 * 4 * (10 * 4 + 16) + 2 * 4 * (4 * 4 + 16))
    rest = 5 * (2 * 4 * 3 + 2 * 4 * 5 + 2 * 5 * 7)
    assert forward_flops(model, 10) == conv + rnn + rest
    assert training_flops(model, [10, 10]) == 6 * (conv + rnn + rest)
    # Per second of audio: 100 frames at a 10 ms hop, 50 at 20 ms.
    assert flops_per_second_of_audio(model) == forward_flops(model, 100)
    assert flops_per_second_of_audio(model, hop_ms=20.0) == forward_flops(model, 50)
    ds2 = ModelConfig(rnn=RNNConfig(layers=5, hidden=800))
    assert 4e9 < flops_per_second_of_audio(DeepSpeech2(ds2, 161, 29)) < 6e9


# The figures of the formula that counted from the config alone, before each layer
# counted its own: the recipes' models must keep them.
RECIPE_FLOPS = {
    # config: (bins, forward FLOPs at 1, 7, 100 and 1000 frames, a step over [100, 37])
    "quickstart": (40, [4_583_296, 13_749_888, 155_832_064, 1_530_820_864], 646_244_736),
    "an4": (64, [9_900_800, 29_702_400, 336_627_200, 3_306_867_200], 1_396_012_800),
    "ds2": (161, [189_617_344, 758_469_376, 9_480_867_200, 94_808_672_000], 39_250_790_208),
}


@pytest.mark.parametrize("name", RECIPE_FLOPS)
def test_recipe_flops_unchanged(name: str) -> None:
    bins, forward, step = RECIPE_FLOPS[name]
    config = load_config(CONFIGS / f"{name}.yaml", check_files=False)
    with torch.device("meta"):  # shapes only: no memory, no random draws
        model = DeepSpeech2(config.model, bins, CLASSES)
    assert [forward_flops(model, n) for n in (1, 7, 100, 1000)] == forward
    assert training_flops(model, [100, 37]) == step
    assert flops_per_second_of_audio(model) == forward[2]


class Halve(SequenceLayer):
    """A test layer in every form: halves each frame, counts one FLOP per value."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.width = width

    def forward(self, x: torch.Tensor, lengths: torch.Tensor):
        return x * 0.5, lengths

    def forward_every_frame(self, x: torch.Tensor, lengths: torch.Tensor):
        return x * 0.5, lengths

    def stream(self, x: torch.Tensor, state: None, final: bool):
        return x * 0.5, None

    def flops(self, frames: int) -> int:
        return self.width * frames


class WithHalve(DeepSpeech2):
    """DeepSpeech2 with ``Halve`` listed after its first RNN layer, and nowhere else."""

    def __init__(self, *args: object) -> None:
        super().__init__(*args)
        self.halve = Halve(self.config.rnn.hidden)

    def sequence_layers(self) -> list[SequenceLayer]:
        conv, first, *rest = super().sequence_layers()
        return [conv, first, self.halve, *rest]


def test_a_layer_listed_in_the_stack_serves_every_path() -> None:
    config = small_config(VARIANTS["gru-lookahead"])
    plain = build(config).eval()
    model = WithHalve(config, BINS, CLASSES).eval()
    model.load_state_dict(plain.state_dict())
    features, lengths = padded_batch([50, 50], garbage=False)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", category=torch.jit.TracerWarning)
        warnings.simplefilter("ignore", category=DeprecationWarning)
        offline, out = model(features, lengths)
        assert not torch.allclose(offline, plain(features, lengths)[0], **TOL)
        traced = torch.jit.trace(TraceableDeepSpeech2(model), (features, lengths),
                                 check_trace=False)
        torch.testing.assert_close(traced(features, lengths)[0], offline, **TOL)
    state, pieces = None, []
    for start in range(0, 50, 9):
        piece, state = model.stream_step(features[:, :, start:start + 9], state)
        pieces.append(piece)
    pieces.append(model.stream_step(features[:, :, :0], state, final=True)[0])
    torch.testing.assert_close(torch.cat(pieces, dim=1), offline, **TOL)
    hidden = config.rnn.hidden
    assert forward_flops(model, 50) == forward_flops(plain, 50) + hidden * int(out[0])


def ctc_step(model: DeepSpeech2, seed: int) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    features, lengths = padded_batch([60, 44, 31], seed=seed)
    generator = torch.Generator().manual_seed(seed)
    targets = torch.randint(1, CLASSES, (3, 8), generator=generator)
    log_probs, out = model(features, lengths)
    loss = F.ctc_loss(log_probs.transpose(0, 1), targets, out, torch.full((3,), 8))
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize("variant", ["gru-bi", "lstm-lookahead"])
def test_ctc_loss_backward_and_bitwise_determinism(variant: str, deterministic: None) -> None:
    config = small_config(VARIANTS[variant], dropout=0.2)
    runs = []
    for _ in range(2):
        model = build(config, seed=3).train()
        torch.manual_seed(11)  # dropout masks
        runs.append((model.state_dict(), *ctc_step(model, seed=5)))
    (init_a, loss_a, grads_a), (init_b, loss_b, grads_b) = runs
    assert torch.isfinite(loss_a) and loss_a > 0
    assert all(torch.equal(init_a[k], init_b[k]) for k in init_a)
    assert torch.equal(loss_a, loss_b)
    for name, grad in grads_a.items():
        assert torch.isfinite(grad).all(), name
        assert grad.abs().sum() > 0, f"{name} gets no gradient"
        assert torch.equal(grad, grads_b[name]), f"{name} differs between identical runs"


def test_deterministic_algorithms_allow_streaming(deterministic: None) -> None:
    model = build(small_config(VARIANTS["lstm-lookahead"])).eval()
    log_probs, state = model.stream_step(torch.randn(1, BINS, 30), final=True)
    assert log_probs.shape[1] == state.frames_out == 15


def test_log_probs_float32_under_autocast() -> None:
    model = build(small_config(VARIANTS["gru-bi"])).eval()
    features, lengths = padded_batch([30, 20])
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        log_probs, _ = model(features, lengths)
    assert log_probs.dtype == torch.float32
    assert torch.isfinite(log_probs).all()


@pytest.mark.parametrize("variant", ["gru-bi", "lstm-lookahead"])
def test_checkpoints_from_before_the_direction_split_load(variant: str) -> None:
    # Earlier versions held both directions in one bidirectional nn.GRU/LSTM named "rnn".
    model = build(small_config(VARIANTS[variant])).eval()
    old = {}
    for key, value in model.state_dict().items():
        key = key.replace(".forward_rnn.", ".rnn.")
        if ".backward_rnn." in key:
            key = key.replace(".backward_rnn.", ".rnn.") + "_reverse"
        old[key] = value
    assert any(k.endswith("_l0_reverse") for k in old) == VARIANTS[variant].bidirectional
    fresh = build(small_config(VARIANTS[variant]), seed=7).eval()
    fresh.load_state_dict(old)
    features, lengths = padded_batch([40, 23])
    torch.testing.assert_close(fresh(features, lengths), model(features, lengths), rtol=0, atol=0)
