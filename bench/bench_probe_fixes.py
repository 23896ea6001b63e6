"""Benchmark: the whole probe on a single-source fault, with sensitivity and fix trials,
against two plain forwards of one sample.

Architectures: those of bench/bench_probe.py, built the same way, each QAT model with one
planted clamp: the output fake quant of a module a third of the way through the graph
narrowed to a quarter of its calibrated range (tests/probe_nets.inject). One input,
torch ops on one thread (--threads).

Baseline, measured in the same run: one plain forward of the float model and one of the
faulty QAT model under ``torch.inference_mode``. Measured: ``compare_models(float, faulty,
x, out, sensitivity=True, try_fixes=True)`` whole (the comparison, the sensitivity pass,
the fix trials, the files), and the same without sensitivity; timed in turns with the
forwards, ``--runs`` times after one warm-up call of each, medians. Printed per
architecture: both ratios, the fix trials' forward passes, and whether the trials
reached the target. Targets (knowledge of #48): the whole probe at most 10x the two
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
from tests.probe_nets import inject  # noqa: E402

TARGET = 10.0
PASSES = 6


def fault_layer(qat) -> str:
    """A module a third of the way through the graph whose output a fake quant observes."""
    observed = [node.args[0].target for node in qat.graph.nodes
                if node.op == "call_module" and str(node.target).startswith("activation_post_process")
                and node.args and getattr(node.args[0], "op", None) == "call_module"]
    return observed[len(observed) // 3]


def measure(arch: str, size: int, runs: int) -> tuple[float, float, int, bool, str]:
    baseline, qat, example = models(arch, size)
    layer = fault_layer(qat)
    faulty = inject(qat, layer, scale_factor=0.25)

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
    return whole / base, without / base, trials["forwards"], reached, layer


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
        print(f"{arch:16s} fault at {layer}: whole probe {whole:6.1f}x, without sensitivity "
              f"{without:6.1f}x two forwards; fix passes {passes:3d}, target "
              f"{'reached' if reached else 'NOT reached'}: {'OK' if holds else 'MISSED'}",
              flush=True)
    print(f"targets: whole probe <= {TARGET:g}x, fix passes <= {PASSES}: "
          f"{'OK' if ok else 'MISSED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
