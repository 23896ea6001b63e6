"""Benchmark: reading and analysing a 50,000-row compare_per_layer table.

The table is in the profiler's real layout: 23 columns, and the CSV without an index
column (knowledge.md §8). Baseline, measured in the same run on the same file: a bare
``pandas.read_csv(F, skipinitialspace=True)`` (without it the " None" cells slow pandas
down and flatter us). Targets: reading + analysing the CSV <= 1.5x the baseline; the
psql .txt of the same table <= 3x. Figures: min and median over 7 runs; targets on the
median.

Run: python bench/bench_quant_analysis.py [ROWS]
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))   # the fixture writers
sys.path.insert(0, str(Path(__file__).resolve().parent))
from timing import spread  # noqa: E402

from qcdoctor.collectors.reading.compare_layers import load_compare, read_layers  # noqa: E402
from tests.qa.writers import layer, write_compare  # noqa: E402


def table(rows: int) -> list[dict]:
    out = []
    for i in range(rows):
        cos = 0.99995 if i < rows // 2 else 0.93 - (i - rows // 2) * 1e-7
        out.append(layer(f"model.block{i // 100}.layer{i % 100}.conv", None if i % 37 == 0 else cos,
                         qscale=0.0078 + (i % 13) * 1e-4, base=(-1.2, 1.1), analy=(-1.19, 1.1)))
    return out



def main() -> int:
    rows = int(sys.argv[1]) if len(sys.argv) > 1 else 50_000
    with tempfile.TemporaryDirectory() as tmp:
        data = table(rows)
        csv = write_compare(Path(tmp) / "csv", data, "23", "csv")
        txt = write_compare(Path(tmp) / "txt", data, "23", "txt")

        def ours(path):
            reading = read_layers(load_compare(path))
            assert reading.origin is not None
        base_min, baseline = spread(lambda: pd.read_csv(csv, skipinitialspace=True), runs=7)
        csv_min, csv_time = spread(lambda: ours(csv), runs=7)
        txt_min, txt_time = spread(lambda: ours(txt), runs=7)
    csv_ratio, txt_ratio = csv_time / baseline, txt_time / baseline
    print(f"rows: {rows} (23 columns, CSV without index); baseline pandas.read_csv"
          f"(skipinitialspace=True): min {base_min * 1000:.1f} ms, median {baseline * 1000:.1f} ms")
    print(f"csv:  min {csv_min * 1000:7.1f} ms, median {csv_time * 1000:7.1f} ms read + analyse"
          f" = {csv_ratio:.2f}x baseline  target <= 1.5x: {'OK' if csv_ratio <= 1.5 else 'MISSED'}")
    print(f"psql: min {txt_min * 1000:7.1f} ms, median {txt_time * 1000:7.1f} ms read + analyse"
          f" = {txt_ratio:.2f}x baseline  target <= 3x: {'OK' if txt_ratio <= 3 else 'MISSED'}")
    return 0 if csv_ratio <= 1.5 and txt_ratio <= 3 else 1


if __name__ == "__main__":
    sys.exit(main())
