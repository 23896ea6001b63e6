"""Real architectures from the pytorchcv model zoo (random weights, fixed seed, no
downloads), a small ViT-style transformer (pytorchcv has none), quantized with torch's own
FX QAT tooling, and the faults the probe tests inject into them."""

from __future__ import annotations

import copy
import os
import warnings

import pytest
import torch
from torch import nn
from torch.ao.quantization import FakeQuantizeBase


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Small activations gain nothing from a second thread, and on a busy machine torch's
    threads wait for each other (8x slower measured): one thread keeps the time steady.
    Imported by a test module, it holds for that module's tests. QCDOCTOR_TEST_THREADS
    runs them with more (a verdict must not depend on the thread count)."""
    before = torch.get_num_threads()
    torch.set_num_threads(int(os.environ.get("QCDOCTOR_TEST_THREADS", "1")))
    yield
    torch.set_num_threads(before)


class FixedFakeQuantize(FakeQuantizeBase):
    """Fake quantization with fixed qparams (a far too small scale, or a 4-bit range).

    Overwriting the scale buffer of the default FusedMovingAvgObsFakeQuantize has no
    effect on its output (it recomputes qparams), hence a module of its own; being a
    FakeQuantizeBase, the sensitivity pass switches it like any torch.ao fake quant."""

    def __init__(self, scale: float, zero_point: int, quant_min: int, quant_max: int):
        super().__init__()
        self.register_buffer("scale", torch.tensor([scale]))
        self.register_buffer("zero_point", torch.tensor([zero_point], dtype=torch.int32))
        self.quant_min, self.quant_max = quant_min, quant_max
        self.dtype = torch.quint8

    def forward(self, x):
        if not self.fake_quant_enabled[0]:
            return x
        return torch.fake_quantize_per_tensor_affine(x, float(self.scale), int(self.zero_point),
                                                     self.quant_min, self.quant_max)

    def calculate_qparams(self):
        return self.scale, self.zero_point


def eager_qat(base: nn.Module, size: int = 8) -> nn.Module:
    """An eager-mode QAT copy of ``base`` (qnnpack qconfig), calibrated on random
    3 x size x size inputs, observers frozen, in eval mode."""
    from torch.ao.quantization import disable_observer, get_default_qat_qconfig, prepare_qat
    qat = copy.deepcopy(base)
    qat.qconfig = get_default_qat_qconfig("qnnpack")
    prepare_qat(qat.train(), inplace=True)
    qat.eval()
    with torch.no_grad():
        qat(torch.randn(16, 3, size, size, generator=torch.Generator().manual_seed(1)))
    qat.apply(disable_observer)
    return qat


def zoo_model(arch: str, size: int, num_classes: int = 1000) -> nn.Module:
    from pytorchcv.model_provider import get_model
    torch.manual_seed(0)
    try:
        model = get_model(arch, pretrained=False, in_size=(size, size),
                          num_classes=num_classes).eval()
    except AssertionError:         # built for one size only (EfficientNet): pooled anyway
        model = get_model(arch, pretrained=False, num_classes=num_classes).eval()
    # the zoo's final pool is a fixed 7x7 (224 inputs); adaptive pooling is the same there
    if isinstance(getattr(model.features, "final_pool", None), nn.AvgPool2d):
        model.features.final_pool = nn.AdaptiveAvgPool2d(1)
    return model


class Attention(nn.Module):
    """Multi-head self-attention written out (matmul, softmax, reshapes), as ViTs do."""

    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads, self.scale = heads, (dim // heads) ** -0.5
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        b, n, c = x.shape[0], x.shape[1], x.shape[2]
        qkv = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        attn = (q @ k.transpose(-2, -1)) * self.scale
        attn = attn.softmax(dim=-1)
        return self.proj((attn @ v).transpose(1, 2).reshape(b, n, c))


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, hidden: int):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = Attention(dim, heads)
        self.mlp = nn.Sequential(nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, dim))

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class TinyViT(nn.Module):
    """Patch embedding, two pre-norm transformer blocks, mean-pooled head: ViT-Tiny's
    geometry (width 192, 3 heads, 16-pixel patches, MLP 4x), two blocks deep."""

    def __init__(self, size: int = 64, patch: int = 16, dim: int = 192, depth: int = 2,
                 heads: int = 3, num_classes: int = 10):
        super().__init__()
        self.patch = nn.Conv2d(3, dim, patch, patch)
        self.pos = nn.Parameter(torch.randn(1, (size // patch) ** 2, dim) * 0.02)
        self.blocks = nn.Sequential(*[Block(dim, heads, dim * 4) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, x):
        x = self.patch(x).flatten(2).transpose(1, 2) + self.pos
        x = self.blocks(x)
        return self.head(self.norm(x).mean(1))


class ToyBlock(nn.Module):
    """conv-bn-relu (in-place relu), conv-bn, then function ops in the block's forward:
    a residual add, a product and a concatenation."""

    def __init__(self, channels: int):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(channels, channels, 3, padding=1), nn.BatchNorm2d(channels)
        self.relu1 = nn.ReLU(inplace=True)
        self.conv2, self.bn2 = nn.Conv2d(channels, channels, 3, padding=1), nn.BatchNorm2d(channels)

    def forward(self, x):
        y = self.bn2(self.conv2(self.relu1(self.bn1(self.conv1(x)))))
        return torch.cat([x + y, x * y], 1)


class ToyNet(nn.Module):
    """A stem conv-bn-relu, one ToyBlock, pooling and a linear-relu-linear head."""

    def __init__(self, channels: int = 4, num_classes: int = 3):
        super().__init__()
        self.stem = nn.Conv2d(3, channels, 3, padding=1)
        self.stem_bn = nn.BatchNorm2d(channels)
        self.stem_relu = nn.ReLU()
        self.block = ToyBlock(channels)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(2 * channels, 6)
        self.fc_relu = nn.ReLU()
        self.head = nn.Linear(6, num_classes)

    def forward(self, x):
        x = self.block(self.stem_relu(self.stem_bn(self.stem(x))))
        return self.head(self.fc_relu(self.fc(self.pool(x).flatten(1))))


def toy(size: int = 16) -> nn.Module:
    """A ToyNet with BN statistics from data and BN gains that are not 1."""
    torch.manual_seed(0)
    model = ToyNet()
    generator = torch.Generator().manual_seed(3)
    for module in model.modules():
        if isinstance(module, nn.BatchNorm2d):
            with torch.no_grad():
                module.weight.copy_(0.5 + torch.rand(module.num_features, generator=generator))
                module.bias.copy_(0.5 * torch.randn(module.num_features, generator=generator))
    settle_batchnorm(model, size)
    return model


def network(arch: str, size: int, *, silu: bool = False, spread: bool = False,
            num_classes: int = 10) -> nn.Module:
    """A float model as trained ones look: BN statistics from data (an untrained BN is an
    identity that would hide a misaligned comparison) and per-channel gains that differ.

    silu: pytorchcv's Swish (traced through by FX) as torch's nn.SiLU (kept as a module).
    spread: dead channels, as trained MobileNets have them: in every expansion conv's BN
    a few channels with gain about 0 (a constant after the ReLU6), so the BN after the depthwise
    conv sees no variance there and folds those channels' weights about 300 times larger
    than the rest (the case per-channel weight quantization exists for)."""
    if arch == "tinyvit":
        torch.manual_seed(0)
        return TinyViT(size, num_classes=num_classes).eval()
    model = zoo_model(arch, size, num_classes=num_classes)
    if silu:
        from pytorchcv.models.common import Swish
        for parent in list(model.modules()):
            for name, child in list(parent.named_children()):
                if isinstance(child, Swish):
                    setattr(parent, name, nn.SiLU())
    generator = torch.Generator().manual_seed(3)
    for module in model.modules():
        if isinstance(module, nn.BatchNorm2d):
            count = module.num_features
            with torch.no_grad():
                module.weight.copy_(0.5 + torch.rand(count, generator=generator))
                module.bias.copy_(0.2 * torch.randn(count, generator=generator))
    if spread:
        for name, module in model.named_modules():
            if name.endswith("conv1.bn") and isinstance(module, nn.BatchNorm2d):
                dead = torch.randperm(module.num_features, generator=generator)[
                    :max(1, module.num_features // 16)]
                with torch.no_grad():       # (a gain of exactly 0 makes QAT's ConvBn
                    module.weight[dead] = 1e-3  # divide 0 by 0)
                    module.bias[dead] = 0.5
    settle_batchnorm(model, size)
    return model


def settle_batchnorm(model: nn.Module, size: int, batches: int = 2, batch_size: int = 8) -> None:
    """BN running statistics from random inputs (cumulative average), the rest in eval."""
    norms = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    if not norms:
        return
    model.eval()
    for bn in norms:
        bn.reset_running_stats()
        bn.momentum = None
        bn.train()
    generator = torch.Generator().manual_seed(4)
    with torch.no_grad():
        for _ in range(batches):
            model(torch.randn(batch_size, 3, size, size, generator=generator))
    for bn in norms:
        bn.momentum = 0.1
    model.eval()


def quantize(model: nn.Module, example: torch.Tensor, batches: int = 2, batch_size: int = 16,
             backend: str = "qnnpack"):
    """(fused float baseline, calibrated FX QAT model): the default QAT qconfig mapping,
    observers calibrated on random data in eval mode (BN statistics stay as they are),
    then frozen. The moving-average observers keep close to the first batch's range, so
    a batch far larger than the probed input makes the calibrated range cover it."""
    from torch.ao.quantization import (
        disable_observer,
        enable_observer,
        get_default_qat_qconfig_mapping,
    )
    from torch.ao.quantization.quantize_fx import fuse_fx, prepare_qat_fx
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")        # FX quantization is deprecated for torchao
        qat = prepare_qat_fx(copy.deepcopy(model).train(),
                             get_default_qat_qconfig_mapping(backend), (example,))
        baseline = fuse_fx(copy.deepcopy(model).eval())
    qat.eval()
    qat.apply(enable_observer)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for _ in range(batches):
            qat(torch.randn((batch_size, *example.shape[1:]), generator=generator))
    qat.apply(disable_observer)
    return baseline, qat


def observer_of(qat: nn.Module, layer) -> str:
    """The name of the fake quant observing ``layer``'s output in an FX QAT model:
    ``layer`` a module's qualified name, or an FX node."""
    for node in qat.graph.nodes:
        if node.op == "call_module" and node.target.startswith("activation_post_process") \
                and node.args and (node.args[0] is layer or
                                   getattr(node.args[0], "target", None) == layer):
            return node.target
    raise KeyError(layer)


def function_node(qat: nn.Module, module: str, op: str, index: int = 0):
    """The ``index``-th FX node calling ``op`` (``add``, ``matmul`` ...) directly inside
    ``module`` (by its nn_module_stack), found without the probe's naming."""
    found = []
    for node in qat.graph.nodes:
        stack = node.meta.get("nn_module_stack") or {}
        paths = [v[0] for v in stack.values()]
        name = node.target if isinstance(node.target, str) else node.target.__name__
        if node.op in ("call_function", "call_method") and paths and paths[-1] == module \
                and name.strip("_") == op:
            found.append(node)
    return found[index]


def inject(qat: nn.Module, layer, *, scale_factor: float | None = None,
           bits: int | None = None, coarse: float | None = None) -> nn.Module:
    """A copy of ``qat`` whose fake quant after ``layer`` (a module name or an FX node of
    ``qat``) is replaced: the calibrated scale times ``scale_factor`` about the same zero
    point (a narrower range: truncation, saturation), ``bits``-bit over the calibrated
    range (rounding), or ``coarse`` times coarser steps over the same range."""
    faulty = copy.deepcopy(qat)
    if isinstance(layer, torch.fx.Node):
        layer = next(n for n in faulty.graph.nodes if n.name == layer.name)
    name = observer_of(faulty, layer)
    setattr(faulty, name, fixed_quantizer(getattr(faulty, name), scale_factor=scale_factor,
                                          bits=bits, coarse=coarse))
    return faulty


def narrowed(qat: nn.Module, layer: str, factor: float) -> nn.Module:
    """A copy of ``qat`` whose (torch.ao, plain) output fake quant of ``layer`` covers
    ``factor`` of its calibrated range: a clamp the probe can round past."""
    faulty = copy.deepcopy(qat)
    observer = faulty.get_submodule(observer_of(faulty, layer)).activation_post_process
    with torch.no_grad():
        observer.min_val.mul_(factor)
        observer.max_val.mul_(factor)
    return faulty


def fixed_quantizer(calibrated, *, scale_factor=None, bits=None, coarse=None):
    scale, zero_point = (float(v) for v in calibrated.calculate_qparams())
    qmin, qmax = calibrated.quant_min, calibrated.quant_max
    if bits is not None:
        low = (qmin - zero_point) * scale
        high = (qmax - zero_point) * scale
        qmax = 2 ** bits - 1
        scale = (high - low) / qmax
        zero_point = int(round(-low / scale))
    if scale_factor is not None:
        scale *= scale_factor
    if coarse is not None:
        scale *= coarse
        zero_point = int(round(zero_point / coarse))
    return FixedFakeQuantize(scale, int(zero_point), qmin if bits is None else 0, qmax)


def coarsen_all(qat: nn.Module, coarse: float) -> nn.Module:
    """A copy of ``qat`` with every activation fake quant ``coarse`` times coarser."""
    faulty = copy.deepcopy(qat)
    for node in faulty.graph.nodes:
        if node.op == "call_module" and node.target.startswith("activation_post_process"):
            setattr(faulty, node.target,
                    fixed_quantizer(getattr(faulty, node.target), coarse=coarse))
    return faulty


def per_tensor_weights(qat: nn.Module, layer: str, example: torch.Tensor) -> nn.Module:
    """A copy of ``qat`` whose ``layer`` quantizes its (BN-folded) weight per tensor
    instead of per channel, calibrated on one forward."""
    from torch.ao.quantization import FakeQuantize, MovingAverageMinMaxObserver
    faulty = copy.deepcopy(qat)
    quantizer = FakeQuantize(observer=MovingAverageMinMaxObserver, quant_min=-128,
                             quant_max=127, dtype=torch.qint8,
                             qscheme=torch.per_tensor_symmetric)
    faulty.get_submodule(layer).weight_fake_quant = quantizer
    with torch.no_grad():
        faulty(example)
    quantizer.disable_observer()
    return faulty


class LutSiLU(nn.Module):
    """SiLU by a 16-entry look-up table over [-4, 4], linear between entries, the ends
    held beyond it (a LUT op as a deployment evaluates it, too coarse)."""

    def __init__(self, entries: int = 16, low: float = -4.0, high: float = 4.0):
        super().__init__()
        grid = torch.linspace(low, high, entries)
        self.register_buffer("grid", grid)
        self.register_buffer("table", grid * torch.sigmoid(grid))
        self.low, self.step = low, (high - low) / (entries - 1)

    def forward(self, x):
        position = ((x - self.low) / self.step).clamp(0, len(self.table) - 1)
        left = position.floor().clamp(max=len(self.table) - 2).long()
        frac = position - left
        return self.table[left] * (1 - frac) + self.table[left + 1] * frac


def swap_module(qat: nn.Module, target: str, module: nn.Module) -> nn.Module:
    """A copy of ``qat`` with the module at ``target`` replaced."""
    faulty = copy.deepcopy(qat)
    parent, _, name = target.rpartition(".")
    setattr(faulty.get_submodule(parent) if parent else faulty, name, module)
    return faulty
