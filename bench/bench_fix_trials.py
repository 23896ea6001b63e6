"""Benchmark: qcdoctor probe --try-fixes, what a trial costs in time and memory.

Architectures: pytorchcv resnet18 (residual) and mobilenetv2_w1 (depthwise), random
weights with BN statistics from data, quantized with torch.ao FX QAT
(tests/probe_nets.network, quantize), every activation fake quant four times too coarse
(so the search has work to do); one small input, torch ops on one thread (--threads).

Time. Baseline, measured in the same run on the same model: one plain forward pass of the
analysis (QAT) model under ``torch.inference_mode``. The fix trials' own time is the probe
with ``try_fixes`` minus the same probe without (no sensitivity in either), both timed in
turns (so both see the same load on a busy machine), ``--runs`` times each, medians; per
forward pass it is that difference / the passes spent (``forwards`` of fix_trials.yaml, the
budget at most). Printed: the passes, the time per pass and its ratio to the plain forward
(a trial is one pass of the copy, plus swapping a quantizer in and out: about 1x).

Memory (``--memory``): in a fresh process per step, the peak resident size reached during
the step minus the resident size before it (torch's allocations are invisible to
tracemalloc); the kernel's peak is reset just before the step (/proc/self/clear_refs).
Steps: the probe without fixes, the probe with them. The trials run after the comparison
has let its own memory go, on one deep copy of the analysis model reused for every trial:
the peak with fixes is about the model's own size (its parameters and buffers) once more,
whatever the number of trials. Printed with its ratio to the model's size; the exit status
says whether it stayed under ``MEMORY_LIMIT`` times it.

Run: python bench/bench_fix_trials.py [--size 64] [--runs 3] [--budget 60]
     [--only resnet18,...] [--memory]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from timing import interleaved, spread  # noqa: E402

from qcdoctor.probe import compare_models  # noqa: E402
from tests.probe_nets import coarsen_all, network, quantize  # noqa: E402

ARCHS = ("resnet18", "mobilenetv2_w1")
MEMORY_LIMIT = 2.0          # peak with fixes above the loaded models, in model sizes


def models(arch: str, size: int):
    """(fused float baseline, faulty QAT model, input)."""
    example = torch.randn(1, 3, size, size, generator=torch.Generator().manual_seed(2))
    fused, qat = quantize(network(arch, size), example, batches=1, batch_size=4)
    return fused, coarsen_all(qat, 4), example


def model_bytes(model: torch.nn.Module) -> int:
    return sum(t.numel() * t.element_size()
               for t in (*model.parameters(), *model.buffers()))


def measure(arch: str, size: int, runs: int, budget: int) -> float:
    """Prints the figures; returns the time per pass / one plain forward."""
    baseline, analysis, example = models(arch, size)

    def forward():
        with torch.inference_mode():
            analysis(example)

    with tempfile.TemporaryDirectory() as tmp:
        def probe():
            compare_models(baseline, analysis, example, Path(tmp) / "p", sensitivity=False)

        def trials():
            return compare_models(baseline, analysis, example, Path(tmp) / "p",
                                  sensitivity=False, try_fixes=True, fix_budget=budget)
        forward()
        first = trials().fix_trials                        # warm-up; its passes are all runs'
        (_, plain), (_, without), (_, with_fixes) = (spread(forward, runs=max(runs, 5)),
                                                     *interleaved(probe, trials, runs=runs))
    passes = first["forwards"]
    per_pass = (with_fixes - without) / passes
    greedy = first["greedy"]
    print(f"{arch:16s} {size:4d}  plain forward {plain * 1e3:7.1f} ms  probe {without:6.2f} s  "
          f"with fixes {with_fixes:6.2f} s: {passes} passes ({len(first['trials'])} trials, "
          f"search {greedy['forwards'] if greedy else 0}), {per_pass * 1e3:7.1f} ms per pass "
          f"= {per_pass / plain:4.2f}x a plain forward", flush=True)
    return per_pass / plain


_PEAK = """import sys, tempfile
sys.path[:0] = [sys.argv[2], sys.argv[2] + "/bench"]
import torch
from peak_memory import peak_mib, reset_peak
torch.set_num_threads(1)
from bench_fix_trials import model_bytes, models
from qcdoctor.probe import compare_models
baseline, analysis, x = models(sys.argv[3], int(sys.argv[4]))
with torch.inference_mode():                    # warm-up: kernels and allocator caches
    baseline(x); analysis(x)
before = reset_peak()                           # the peak starts again from here
with tempfile.TemporaryDirectory() as out:
    compare_models(baseline, analysis, x, out + "/p", sensitivity=False,
                   try_fixes=sys.argv[1] == "fixes", fix_budget=int(sys.argv[5]))
print(peak_mib() - before, model_bytes(analysis) / 2**20)
"""


def peak(step: str, arch: str, size: int, budget: int) -> tuple[float, float]:
    """(peak MiB above the loaded models during ``step``, the model's MiB)."""
    done = subprocess.run([sys.executable, "-c", _PEAK, step, str(ROOT), arch, str(size),
                           str(budget)], capture_output=True, text=True, check=True)
    above, size_mib = done.stdout.strip().splitlines()[-1].split()
    return float(above), float(size_mib)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--budget", type=int, default=60, help="forward passes per probe")
    parser.add_argument("--only", help="comma-separated architectures")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--memory", action="store_true", help="also the peak memory")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    archs = args.only.split(",") if args.only else ARCHS
    start = time.perf_counter()
    for arch in archs:
        measure(arch, args.size, args.runs, args.budget)
    print(f"({time.perf_counter() - start:.0f} s)")
    status = 0
    if args.memory:
        for arch in archs:
            without, model = peak("probe", arch, args.size, args.budget)
            with_fixes, _ = peak("fixes", arch, args.size, args.budget)
            ratio = with_fixes / model
            status |= ratio >= MEMORY_LIMIT
            print(f"{arch:16s} peak memory above the loaded models: probe {without:.1f} MiB, "
                  f"with fixes {with_fixes:.1f} MiB = {ratio:.2f}x the model ({model:.1f} MiB; "
                  f"limit {MEMORY_LIMIT:g}x: {'OK' if ratio < MEMORY_LIMIT else 'MISSED'})")
    return int(status)


if __name__ == "__main__":
    sys.exit(main())
