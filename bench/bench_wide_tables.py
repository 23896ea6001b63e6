"""Benchmark: compare_per_layer tables with wide headers, read as triage reads them.

The baseline, measured in the same run, in turns: the same rows in the profiler's own
23-column table, read by the same reader (``load_compare``). Measured beside it:

- the rows under a header of 2,000 columns (the extra ones unused): past the column cap
  (``limits.TABLE_COLUMNS``), so refused before a row is parsed. Target: <= 0.1x (the
  column-by-column selection this replaced took 49 s for such a header);
- the rows widened to the cap, every line as wide as its header (the unused cells
  empty), read: its columns are chosen as the file is read, so the time follows the
  file's size. Target: <= 2x the baseline per byte of file (an empty cell is two bytes,
  and pandas' work is by the cell).

Both for the CSV and the psql .txt. Figures: min and median over 7 runs; targets on the
median.

Run: python bench/bench_wide_tables.py [ROWS]      (default 20,000)
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))   # the fixture writers
sys.path.insert(0, str(Path(__file__).resolve().parent))
from timing import interleaved  # noqa: E402

from qcdoctor.collectors import limits  # noqa: E402
from qcdoctor.collectors.qa_writers import cell, compare_rows, psql  # noqa: E402
from qcdoctor.collectors.reading.compare_layers import load_compare  # noqa: E402
from qcdoctor.errors import QcdoctorError  # noqa: E402
from tests.qa.writers import layer  # noqa: E402

REFUSED_TARGET, PER_BYTE_TARGET = 0.1, 2.0


def write(folder: Path, fmt: str, rows: int, columns: int, cells_too: bool) -> Path:
    """The table of ``rows`` rows, its header widened with unused columns to ``columns``
    header cells (the psql index column counted); ``cells_too``: each row as wide."""
    header, values = compare_rows([layer(f"model.block{i // 100}.layer{i % 100}.conv",
                                         0.99995 if i < rows // 2 else 0.93 - i * 1e-7)
                                   for i in range(rows)], "23")
    unused = [f"unused_{i}" for i in range(max(0, columns - len(header) - (fmt == "txt")))]
    empty = [""] * len(unused) if cells_too else []
    folder.mkdir(parents=True, exist_ok=True)
    if fmt == "csv":
        path = folder / "compare_per_layer_out.csv"
        lines = [", ".join(header + unused)]
        lines += [", ".join([cell(v, True) for v in r] + empty) for r in values]
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        return path
    path = folder / "compare_per_layer_out.txt"
    if cells_too:
        path.write_text(psql(header + unused, [[cell(v, False) for v in r] + empty
                                               for r in values]), encoding="utf-8")
        return path
    # the header alone widened: its rows keep their 23 cells
    narrow = psql(header, [[cell(v, False) for v in r] for r in values]).splitlines()
    wide = psql(header + unused, [[""] * (len(header) + len(unused))]).splitlines()
    path.write_text("\n".join(wide[:3] + narrow[3:]) + "\n", encoding="utf-8")
    return path


def refused(path: Path) -> None:
    try:
        load_compare(path)
    except QcdoctorError:
        return
    raise AssertionError(f"{path} was read, past the column cap")


def measure(folder: Path, fmt: str, rows: int) -> bool:
    """Prints the figures of one format; whether both targets were met."""
    base = write(folder / f"{fmt}_23", fmt, rows, 23, False)
    wide = write(folder / f"{fmt}_2000", fmt, rows, 2_000, False)
    capped = write(folder / f"{fmt}_cap", fmt, rows, limits.TABLE_COLUMNS, True)
    (b_min, b_med), (w_min, w_med) = interleaved(lambda: load_compare(base),
                                                 lambda: refused(wide))
    (c_min, c_med), (_, b2_med) = interleaved(lambda: load_compare(capped),
                                              lambda: load_compare(base))
    ratio = w_med / b_med
    size = capped.stat().st_size / base.stat().st_size
    per_byte = c_med / b2_med / size
    print(f"{fmt}:  23 columns ({base.stat().st_size / 1e6:.1f} MB): min "
          f"{b_min * 1000:7.1f} ms, median {b_med * 1000:7.1f} ms")
    print(f"{fmt}:  2,000-column header, refused: min {w_min * 1000:7.1f} ms, median "
          f"{w_med * 1000:7.1f} ms = {ratio:.3f}x  target <= {REFUSED_TARGET}x: "
          f"{'OK' if ratio <= REFUSED_TARGET else 'MISSED'}")
    print(f"{fmt}:  {limits.TABLE_COLUMNS}-column rows ({size:.1f}x the bytes), read: "
          f"min {c_min * 1000:7.1f} ms, median {c_med * 1000:7.1f} ms = "
          f"{c_med / b2_med:.2f}x, {per_byte:.2f}x per byte  target <= "
          f"{PER_BYTE_TARGET}x: {'OK' if per_byte <= PER_BYTE_TARGET else 'MISSED'}")
    return ratio <= REFUSED_TARGET and per_byte <= PER_BYTE_TARGET


def main() -> int:
    rows = int(sys.argv[1]) if len(sys.argv) > 1 else 20_000
    print(f"rows: {rows}; baseline: the same rows in the 23-column table, read by "
          f"load_compare; column cap {limits.TABLE_COLUMNS}")
    with tempfile.TemporaryDirectory() as tmp:
        met = [measure(Path(tmp), fmt, rows) for fmt in ("csv", "txt")]
    return 0 if all(met) else 1


if __name__ == "__main__":
    sys.exit(main())
