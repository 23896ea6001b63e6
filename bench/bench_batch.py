"""Benchmark: 1,000 cases in one batch call against the in-process engine rate.

- in process: ``load_case`` + ``triage_case`` over the 1,000 case folders in a loop (the
  rules compiled, as in a long-running process): the reference rate.
- ``qcdoctor triage DIR --recursive --jobs 1``: one command for all 1,000 (start-up, rule
  compilation and the summary table included) as a share of the in-process rate,
  target >= 0.5x.
- ``--jobs 2``: the same command with two worker processes; its speed-up over --jobs 1,
  target >= 1.3x on a 2-core machine (shared with other work, so not the ideal 2x).

Figures are min and median over repeats (--jobs 1 and 2 in turns); targets are judged on
the median.
The cases are bench/cases.py's ``varied_cases`` (fixed seed).

Run: python bench/bench_batch.py
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_triage import QCDOCTOR, verdict  # noqa: E402
from cases import varied_cases  # noqa: E402
from timing import interleaved, spread  # noqa: E402

from qcdoctor.collectors.case_file import load_case  # noqa: E402
from qcdoctor.engine.diagnosis.triage import triage_case  # noqa: E402

CASES = 1000
RUNS = 3


def write_cases(root: Path) -> list[Path]:
    folders = []
    for i, text in enumerate(varied_cases(CASES)):
        folder = root / f"case_{i:04d}"
        folder.mkdir()
        (folder / "case.yaml").write_text(text, encoding="utf-8")
        folders.append(folder)
    return folders


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        folders = write_cases(root)

        def in_process():
            for folder in folders:
                triage_case(load_case(folder), use_env=False)
        in_process()                                    # warm: rules compiled, caches filled
        lo, med = spread(in_process, RUNS)
        rate, best_rate = CASES / med, CASES / lo
        print(f"in process: {CASES} cases, min {lo:.2f} s, median {med:.2f} s ="
              f" {rate:.0f} cases/s (best {best_rate:.0f})")

        def batch(jobs: int):
            def call():
                done = subprocess.run(QCDOCTOR + ["triage", str(root), "--recursive", "--no-env",
                                                  "--jobs", str(jobs), "--lang", "en"],
                                      capture_output=True, text=True)
                if done.returncode != 0 or f"{CASES} cases: {CASES} clean" not in done.stdout:
                    raise SystemExit(f"batch failed ({done.returncode}): {done.stderr[-500:]}")
            return call
        results = []
        # --jobs 1 and 2 in turns, so the speed-up is not a matter of when each block ran
        one, two = interleaved(batch(1), batch(2), runs=RUNS)
        ratio = (CASES / one[1]) / rate
        results.append(ratio >= 0.5)
        print(f"batch --jobs 1: min {one[0]:.2f} s, median {one[1]:.2f} s ="
              f" {CASES / one[1]:.0f} cases/s = {ratio:.2f}x the in-process rate"
              f"  target >= 0.5x: {verdict(ratio >= 0.5)}")
        speedup = one[1] / two[1]
        results.append(speedup >= 1.3)
        print(f"batch --jobs 2: min {two[0]:.2f} s, median {two[1]:.2f} s ="
              f" {CASES / two[1]:.0f} cases/s = {speedup:.2f}x --jobs 1"
              f"  target >= 1.3x: {verdict(speedup >= 1.3)}")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
