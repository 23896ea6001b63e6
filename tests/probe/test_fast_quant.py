"""probe/fast_quant.py: a frozen plain torch.ao fake quant computed in place gives the
values torch's kernel gives, element by element (rounding ties, both ends of the range,
NaN and infinities per tensor), per tensor and per channel; anything it cannot mirror is
left to the quantizer's own call; a switch turned or a scale written while the probe's
forwards are in place is honoured; and every quantizer gets its own forward back."""

from __future__ import annotations

import itertools

import pytest

torch = pytest.importorskip("torch")

from torch.ao.quantization import (  # noqa: E402
    FakeQuantize,
    FusedMovingAvgObsFakeQuantize,
    MovingAverageMinMaxObserver,
    MovingAveragePerChannelMinMaxObserver,
)
from torch.ao.quantization.fake_quantize import (  # noqa: E402
    default_fixed_qparams_range_0to1_fake_quant,
    default_fixed_qparams_range_neg1to1_fake_quant,
)

from qcdoctor.probe import fast_quant, fused  # noqa: E402
from qcdoctor.probe.fast_quant import FastQuantizers, fake_quant  # noqa: E402
from tests.probe_nets import one_thread  # noqa: E402,F401 - autouse

KINDS = (FakeQuantize, FusedMovingAvgObsFakeQuantize)


@pytest.fixture(autouse=True, params=[True, False], ids=["fused", "torch"])
def kernel(request, monkeypatch):
    """Every test with the fused kernel's one pass and with torch's in-place passes."""
    monkeypatch.setattr(fused, "ENABLED", request.param)
    return request.param
PER_TENSOR = [(torch.per_tensor_symmetric, -128, 127, torch.qint8),
              (torch.per_tensor_affine, 0, 255, torch.quint8),
              (torch.per_tensor_affine, 0, 15, torch.quint8),          # 4 bits, a zero point
              (torch.per_tensor_symmetric, -32768, 32767, torch.qint32)]
PER_CHANNEL = [(torch.per_channel_symmetric, -128, 127, torch.qint8),
               (torch.per_channel_affine, 0, 255, torch.quint8),        # zero points per row
               (torch.per_channel_affine, -8, 7, torch.qint8)]          # 4 bits


def _frozen(kind, observer, scheme, sample, **extra):
    qscheme, low, high, dtype = scheme
    quantizer = kind(observer=observer, quant_min=low, quant_max=high, dtype=dtype,
                     qscheme=qscheme, **extra)
    quantizer(sample)
    quantizer.disable_observer()
    quantizer.eval()
    return quantizer


def _ties(quantizer, shape, axis=None):
    """Values on the rounding ties of each scale, and past both ends of its range; per
    channel, eight values a channel along ``axis``."""
    steps = (torch.arange(-300, 300, dtype=torch.float32) + 0.5)
    scale = quantizer.scale.reshape(-1)
    if axis is None:
        return (steps * scale).reshape(-1)
    count = scale.numel()
    picked = steps[torch.arange(count * 8) % steps.numel()].reshape(count, 8)
    grid = picked * scale.reshape(-1, 1)
    return grid.movedim(0, axis) if axis else grid


@pytest.mark.parametrize("kind, scheme", list(itertools.product(KINDS, PER_TENSOR)))
def test_per_tensor_values_are_the_kernels(kind, scheme):
    generator = torch.Generator().manual_seed(0)
    for shift in (0.0, 1.0, -2.5):
        quantizer = _frozen(kind, MovingAverageMinMaxObserver, scheme,
                            torch.randn(4000, generator=generator) * 3 + shift)
        x = torch.cat([torch.randn(5000, generator=generator) * 6, _ties(quantizer, None),
                       torch.tensor([float("nan"), float("inf"), -float("inf"), 1e30, -1e30])])
        with torch.inference_mode():
            assert torch.equal(fake_quant(quantizer, x), quantizer(x))


LAYOUTS = {
    "transposed": lambda x: x.reshape(60, 200).t(),
    "permuted": lambda x: x.reshape(3, 4, 25, 40).permute(2, 0, 3, 1),
    "a slice with gaps": lambda x: x.reshape(120, 100)[:, ::2],
    "one element of a dimension": lambda x: x.reshape(3, 1, 40, 100)[:, :, 7:8],
}


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("kind", KINDS)
def test_a_transposed_or_sliced_input_gets_the_kernels_values_and_layout(kind, layout):
    """An input that is not contiguous (an attention's transpose, a permute): quantized
    in its own memory order where it is one block, else by torch's passes; the values
    and the strides are those torch's kernel gives."""
    generator = torch.Generator().manual_seed(5)
    quantizer = _frozen(kind, MovingAverageMinMaxObserver, PER_TENSOR[0],
                        torch.randn(4000, generator=generator) * 3)
    flat = torch.randn(12_000, generator=generator) * 6
    flat[::997] = float("nan")
    x = LAYOUTS[layout](flat)
    assert not x.is_contiguous()
    with torch.inference_mode():
        got, want = fake_quant(quantizer, x), quantizer(x)
    assert torch.equal(got, want)
    if fused.available() and fused.ENABLED and layout in ("transposed", "permuted"):
        assert got.stride() == x.stride()          # one pass over the block it lies in


@pytest.mark.parametrize("kind, scheme, axis", list(itertools.product(KINDS, PER_CHANNEL,
                                                                        (0, 1))))
def test_per_channel_values_are_the_kernels(kind, scheme, axis):
    """A conv weight (channels first) and a weight whose channels are its second axis (a
    transposed conv's), every channel on its own scale and zero point."""
    generator = torch.Generator().manual_seed(1)
    shape = (6, 5, 3, 3) if axis == 0 else (5, 6, 3, 3)
    # channels a hundred times apart, each off centre
    spread = torch.logspace(-2, 0, 6).reshape([-1 if i == axis else 1 for i in range(4)])
    weight = torch.randn(shape, generator=generator) * spread + spread * 0.3
    quantizer = _frozen(kind, MovingAveragePerChannelMinMaxObserver, scheme,
                        weight.movedim(axis, 0), ch_axis=0)
    quantizer.ch_axis = axis
    if kind is FusedMovingAvgObsFakeQuantize and axis != 0:
        # torch's fused kernel takes axis 0 only: its call raises, and so it decides
        assert fake_quant(quantizer, weight) is None
        return
    with torch.inference_mode():
        assert torch.equal(fake_quant(quantizer, weight), quantizer(weight))
        ties = _ties(quantizer, None, axis=axis)
        assert torch.equal(fake_quant(quantizer, ties), quantizer(ties))
        wide = weight * 40                                  # past both ends of each range
        assert torch.equal(fake_quant(quantizer, wide), quantizer(wide))


@pytest.mark.parametrize("make", [default_fixed_qparams_range_0to1_fake_quant,
                                  default_fixed_qparams_range_neg1to1_fake_quant])
def test_a_fixed_qparams_quantizer_gives_the_kernels_values_with_its_observer_on(make):
    """Sigmoid's and tanh's output quantizers (fixed scale, zero point 0 and 128): their
    observer may stay on, it only copies the fixed scale back; switched off, they give the
    input back as torch's forward does (that observer still on)."""
    quantizer = make().eval()
    assert bool(quantizer.observer_enabled[0])
    generator = torch.Generator().manual_seed(5)
    x = torch.cat([torch.rand(5000, generator=generator) * 2.4 - 1.2, _ties(quantizer, None),
                   torch.tensor([float("nan"), float("inf"), -float("inf"), 1e30, -1e30])])
    with torch.inference_mode():
        mirrored = fake_quant(quantizer, x)
        assert mirrored is not None and torch.equal(mirrored, quantizer(x))
        quantizer.disable_fake_quant()
        assert fake_quant(quantizer, x) is x and quantizer(x) is x


def test_a_nan_in_a_weight_is_left_to_the_kernel():
    weight = torch.randn(4, 3)
    quantizer = _frozen(FakeQuantize, MovingAveragePerChannelMinMaxObserver,
                        PER_CHANNEL[0], weight, ch_axis=0)
    weight[1, 2] = float("nan")
    assert fake_quant(quantizer, weight) is None


def test_what_it_cannot_mirror_is_left_to_the_quantizers_own_call():
    quantizer = FakeQuantize(observer=MovingAverageMinMaxObserver, quant_min=0, quant_max=255)
    quantizer(torch.randn(100))
    assert fake_quant(quantizer, torch.randn(10)) is None        # its observer still on
    quantizer.disable_observer()
    assert fake_quant(quantizer, torch.randn(10)) is not None
    assert fake_quant(quantizer, torch.randn(10).double()) is None
    assert fake_quant(quantizer, [1.0]) is None
    quantizer.disable_fake_quant()
    quantizer.enable_observer()
    assert fake_quant(quantizer, torch.randn(10)) is None        # off, but observing
    assert fake_quant(torch.nn.Identity(), torch.randn(10)) is None
    floats = FakeQuantize(observer=MovingAveragePerChannelMinMaxObserver, quant_min=0,
                          quant_max=255, dtype=torch.quint8,
                          qscheme=torch.per_channel_affine_float_qparams, ch_axis=0)
    floats(torch.randn(4, 3))
    floats.disable_observer()
    assert fake_quant(floats, torch.randn(4, 3)) is None          # float zero points
    weight = torch.randn(4, 3)
    per_channel = _frozen(FakeQuantize, MovingAveragePerChannelMinMaxObserver,
                          PER_CHANNEL[0], weight, ch_axis=0)
    assert fake_quant(per_channel, torch.randn(5, 3)) is None     # 5 rows, 4 scales


@pytest.mark.parametrize("kind", KINDS)
def test_a_quantizer_switched_off_gives_its_input_back_as_torch_does(kind):
    """Off with nothing observed: the input's values, the input itself where torch's
    forward gives it back (FakeQuantize), a copy where torch's kernel copies (fused: a
    writer of the output must not reach the input)."""
    quantizer = _frozen(kind, MovingAverageMinMaxObserver, PER_TENSOR[1], torch.randn(100))
    quantizer.disable_fake_quant()
    x = torch.randn(6, 5)
    torch_out = type(quantizer).forward(quantizer, x)
    out = fake_quant(quantizer, x)
    assert out is not None and torch.equal(out, torch_out)
    assert (out is x) == (torch_out is x) and (out.data_ptr() == x.data_ptr()) == \
        (torch_out.data_ptr() == x.data_ptr())
    quantizer.enable_fake_quant()                              # switched back: quantizes
    assert not torch.equal(fake_quant(quantizer, x), x)


class _Two(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.first = FusedMovingAvgObsFakeQuantize(observer=MovingAverageMinMaxObserver,
                                                   quant_min=0, quant_max=255)
        self.second = FakeQuantize(observer=MovingAverageMinMaxObserver, quant_min=0,
                                   quant_max=255)

    def forward(self, x):
        return self.second(self.first(x) * 2)


def _calibrated() -> _Two:
    model = _Two()
    model(torch.randn(500, generator=torch.Generator().manual_seed(3)) * 2)
    model.apply(torch.ao.quantization.disable_observer)
    return model.eval()


def test_the_probes_forwards_give_the_same_values_honour_switches_and_are_removed():
    model, x = _calibrated(), torch.randn(300, generator=torch.Generator().manual_seed(4))
    with torch.inference_mode():
        expected = model(x)
    fast = FastQuantizers(list(model.modules()))
    try:
        assert {id(m) for m in fast.installed} == {id(model.first), id(model.second)}
        with torch.inference_mode():
            assert torch.equal(model(x), expected)
            model.second.disable_fake_quant()              # as the sensitivity pass does
            assert torch.equal(model(x), model.first(x) * 2)
            model.second.enable_fake_quant()
            for quantizer in (model.first, model.second):
                # a scale written in place: the fused kernel undoes it from its observer's
                # range, the plain one uses it; the probe's forward does as each does
                quantizer.scale.mul_(2.0)
                mirrored = quantizer(x)
                assert torch.equal(mirrored, type(quantizer).forward(quantizer, x))
        # under autograd the kernel's own call: its straight-through gradient
        leaf = x.clone().requires_grad_()
        model(leaf).sum().backward()
        assert leaf.grad is not None and bool((leaf.grad != 0).any())
    finally:
        fast.close()
    assert all("forward" not in m.__dict__ for m in model.modules())


def test_a_forward_of_the_users_own_is_left_alone_and_switching_off_leaves_all():
    model = _calibrated()
    mine = model.first.forward = lambda x: x + 1.0
    fast = FastQuantizers(list(model.modules()))
    assert [id(m) for m in fast.installed] == [id(model.second)]
    fast.close()
    assert model.first.forward is mine and "forward" not in model.second.__dict__
    old = fast_quant.ENABLED
    fast_quant.ENABLED = False
    try:
        assert FastQuantizers(list(model.modules())).installed == []
        assert fake_quant(model.second, torch.randn(3)) is None
    finally:
        fast_quant.ENABLED = old


def test_a_fused_quantizers_plan_outlives_its_own_calls_and_follows_its_observers_range(
        monkeypatch):
    """The fused kernel writes its scale and zero point at every call: the model's own
    forwards between two probes must not make every plan be read again (a settling call
    each), and a range that did change (an observer switched on, a state loaded) must."""
    model, x = _calibrated(), torch.randn(300, generator=torch.Generator().manual_seed(5))
    quantizer = model.first
    reads = []
    read_plan = fast_quant._read_plan
    monkeypatch.setattr(fast_quant, "_read_plan", lambda q: reads.append(q) or read_plan(q))
    assert fake_quant(quantizer, x) is not None and reads == [quantizer]
    with torch.inference_mode():
        type(quantizer).forward(quantizer, x)              # the model's own forward
        type(quantizer).forward(quantizer, x)
    assert torch.equal(fake_quant(quantizer, x), type(quantizer).forward(quantizer, x))
    assert reads == [quantizer]                            # the plan stood
    quantizer.enable_observer()                            # the range moves ...
    type(quantizer).forward(quantizer, x * 5)
    quantizer.disable_observer()
    assert torch.equal(fake_quant(quantizer, x * 3), type(quantizer).forward(quantizer, x * 3))
    assert len(reads) == 2
    state = _calibrated().first.state_dict()               # ... or is loaded
    quantizer.load_state_dict(state)
    assert torch.equal(fake_quant(quantizer, x * 3), type(quantizer).forward(quantizer, x * 3))
    assert len(reads) == 3


def test_unclipped_rounds_to_the_steps_without_the_clamp_and_only_within():
    """The bad-case search's clean model: each mirrored frozen quantizer rounds to its
    steps, values past its range kept; a quantizer the probe does not mirror is not
    counted (it would keep its clamp); outside the block every one clamps again."""
    model = _calibrated()
    x = torch.linspace(-40.0, 40.0, 301)              # far past the calibrated range
    fast = FastQuantizers(list(model.modules()))
    try:
        quantizers = [model.first, model.second]
        assert fast_quant.unclippable(quantizers) == quantizers
        with torch.inference_mode():
            clamped = model.second(x)
            with fast_quant.unclipped(quantizers) as count:
                free = model.second(x)
            again = model.second(x)
        scale = float(model.second.scale)
        assert count == 2 and torch.equal(again, clamped)
        assert float(free.max()) > float(clamped.max()) and float(free.min()) < 0.0
        assert torch.equal(free, torch.round(x * (1.0 / torch.tensor(scale))) * scale)
        model.second.disable_fake_quant()                   # off: nothing to round
        assert fast_quant.unclippable(quantizers) == [model.first]
    finally:
        fast.close()
    assert fast_quant.unclippable([model.first]) == []      # no longer mirrored
