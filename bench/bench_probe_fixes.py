"""Benchmark: the whole probe on a single-source fault, with sensitivity and fix trials,
against two plain forwards of one sample.

Architectures: those of bench/bench_probe.py, each QAT model with one planted fault at
the first layer from a third of the way through the graph where the fault takes the
output below Cosine 0.99 (``planted``: a fault in a squeeze-excitation branch or before
a ReLU6 fades, and is no single source). The fault: in the depthwise networks
(mobilenetv2_w1, efficientnet_b0; built with dead channels and per-channel weights,
tests/probe_nets.network(spread=True)), one depthwise conv's weights per tensor; in the
others (built as bench/bench_probe.py does), a module's output fake quant narrowed to a
quarter of its calibrated range (tests/probe_nets.inject). The baseline is the clean QAT
model, so the fault is the one source of error (against the float model, random
depthwise networks carry a quantization error of their own that no single fix removes:
tests/probe/test_fix_trials.py). One input, torch ops on one thread (--threads).

Baseline of the timing, measured in the same run: one plain forward of the clean and one
of the faulty QAT model under ``torch.inference_mode``. Measured: ``compare_models(clean,
faulty, x, out, sensitivity=True, try_fixes=True)`` whole (the comparison, the sensitivity pass,
the fix trials, the files), and the same without sensitivity; timed in turns with the
forwards, ``--runs`` times after one warm-up call of each, medians. Printed per
architecture: both ratios, the fix trials' forward passes, and whether the trials
reached the target. Targets (issue #48): the whole probe at most 10x the two
forwards, and the fix trials of a single-source fault within 6 passes; the exit status
says whether both hold on every architecture.

Run: python bench/bench_probe_fixes.py [--size 64] [--runs 3] [--only resnet18,...]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from bench_probe import ARCHS, kernel_line, models  # noqa: E402
from timing import interleaved  # noqa: E402

from qcdoctor.probe import compare_models  # noqa: E402
from tests.probe_nets import inject, network, per_tensor_weights, quantize  # noqa: E402

TARGET = 10.0
PASSES = 6
DOMINATES = 0.99       # the model output's Cosine a planted fault must take it below
DEPTHWISE = ("mobilenetv2_w1", "efficientnet_b0")


def cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(torch.nn.functional.cosine_similarity(a.flatten(), b.flatten(), dim=0))


def observed_modules(qat) -> list[str]:
    """The modules whose output a fake quant observes, in graph order."""
    return [node.args[0].target for node in qat.graph.nodes
            if node.op == "call_module" and str(node.target).startswith("activation_post_process")
            and node.args and getattr(node.args[0], "op", None) == "call_module"]


def depthwise_convs(qat) -> list[str]:
    """The depthwise convs with a weight quantizer, in graph order."""
    calls = [str(node.target) for node in qat.graph.nodes if node.op == "call_module"]
    return [name for name in calls if getattr(qat.get_submodule(name), "groups", 1) > 1
            and hasattr(qat.get_submodule(name), "weight_fake_quant")]


def planted(arch: str, size: int) -> tuple[str, str, torch.nn.Module, torch.nn.Module, torch.Tensor]:
    """(fault kind, layer, clean QAT model, faulty copy, input): the first layer from a
    third of the way through the graph whose fault takes the model output below Cosine
    ``DOMINATES`` against the clean QAT model (a fault in a squeeze-excitation branch or
    before a ReLU6 fades, and is no single source). The fault: in the depthwise networks,
    one depthwise conv's weights per tensor where its channels' ranges differ by two
    decades (tests/probe_nets.network(spread=True)); in the others, a module's output
    fake quant narrowed to a quarter of its calibrated range."""
    if arch in DEPTHWISE:
        example = torch.randn(1, 3, size, size, generator=torch.Generator().manual_seed(2))
        _, qat = quantize(network(arch, size, spread=True), example, batches=1, batch_size=4,
                          backend="x86")
        kind, layers = "per-tensor depthwise weights", depthwise_convs(qat)

        def fault(layer):
            return per_tensor_weights(qat, layer, example)
    else:
        _, qat, example = models(arch, size)
        kind, layers = "clamp", observed_modules(qat)

        def fault(layer):
            return inject(qat, layer, scale_factor=0.25)
    with torch.inference_mode():
        clean = qat(example)
    for layer in layers[len(layers) // 3:]:
        faulty = fault(layer)
        with torch.inference_mode():
            if cosine(clean, faulty(example)) < DOMINATES:
                return kind, layer, qat, faulty, example
    raise SystemExit(f"{arch}: no layer of the last two thirds dominates the output when faulty")


def measure(arch: str, size: int, runs: int) -> tuple[float, float, int, bool, str]:
    kind, layer, baseline, faulty, example = planted(arch, size)

    def forwards():
        with torch.inference_mode():
            baseline(example)
            faulty(example)

    with tempfile.TemporaryDirectory() as tmp:
        found = {}

        def probe(sensitivity: bool):
            result = compare_models(baseline, faulty, example, Path(tmp) / str(sensitivity),
                                    sensitivity=sensitivity, try_fixes=True)
            found[sensitivity] = result.fix_trials
        calls = (forwards, lambda: probe(True), lambda: probe(False))
        for call in calls:                                   # warm-up
            call()
        (_, base), (_, whole), (_, without) = interleaved(*calls, runs=runs)
    trials = found[True]
    reached = trials.recommended() is not None
    return whole / base, without / base, trials["forwards"], reached, f"{kind} at {layer}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--only", help="comma-separated architectures")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(kernel_line(), flush=True)
    ok = True
    for arch in args.only.split(",") if args.only else ARCHS:
        whole, without, passes, reached, layer = measure(arch, args.size, args.runs)
        holds = whole <= TARGET and passes <= PASSES and reached
        ok = ok and holds
        print(f"{arch:16s} {layer}: whole probe {whole:6.1f}x, without sensitivity "
              f"{without:6.1f}x two forwards; fix passes {passes:3d}, target "
              f"{'reached' if reached else 'NOT reached'}: {'OK' if holds else 'MISSED'}",
              flush=True)
    print(f"targets: whole probe <= {TARGET:g}x, fix passes <= {PASSES}: "
          f"{'OK' if ok else 'MISSED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
