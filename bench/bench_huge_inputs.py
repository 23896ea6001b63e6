"""Benchmark: huge inputs are refused or answered quickly, in bounded memory.

Each input runs ``qcdoctor triage CASE --format json`` in a fresh process. The baseline,
measured in the same run on the same file, is a fresh process that only parses the file:
``yaml.load(Loader=yaml.CSafeLoader)`` for case files, ``pandas.read_csv`` for tables
(``read_fwf`` for fx_graph.txt). Targets: at most 3x the baseline's wall time and under
500 MB peak RSS. Peak RSS is read with getrusage(RUSAGE_CHILDREN) in a wrapper process of
its own per run, so no figure is the high-water mark of an earlier input.

Run: python bench/bench_huge_inputs.py [MB]      (default 50: the size of the huge files)
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.qa.writers import layer, write_compare, write_fx_graph  # noqa: E402

TARGET_RATIO, TARGET_MB = 3.0, 500
HEAD = "schema: qcdoctor/case-v1\nstages: {qat_bc: {status: normal}, quantized_bc: {status: abnormal}}\n"
# runs a command as its child; reports its wall time, exit code and peak RSS
WRAPPER = """
import json, resource, subprocess, sys, time
start = time.perf_counter()
try:
    done = subprocess.run(sys.argv[2:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          timeout=float(sys.argv[1]))
    rc, err, timed_out = done.returncode, done.stderr, False
except subprocess.TimeoutExpired as exc:
    rc, err, timed_out = None, exc.stderr or b"", True
wall = time.perf_counter() - start
print(json.dumps({"rc": rc, "wall": wall, "timed_out": timed_out,
                  "rss_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
                  "err": err.decode("utf-8", "replace").strip().splitlines()[:1]}))
"""
# the baseline is stopped here: CSafeLoader needs hours for a 50 MB flow list
BASELINE_TIMEOUT = 300.0
PARSE_YAML = "import sys, yaml; yaml.load(open(sys.argv[1], encoding='utf-8'), Loader=yaml.CSafeLoader)"
READ_CSV = ("import sys, pandas; pandas.read_csv(sys.argv[1], sep=',', skipinitialspace=True, "
            "header=0, on_bad_lines='skip')")
READ_FX_AND_TABLE = ("import sys, pandas; pandas.read_fwf(sys.argv[1], skiprows=[0, 2]); "
                     "pandas.read_csv(sys.argv[2], sep='|', skiprows=[0, 2], on_bad_lines='skip')")


def measure(command: list[str], timeout: float = 3600.0) -> dict:
    done = subprocess.run([sys.executable, "-c", WRAPPER, str(timeout), *command],
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def _big_yaml(path: Path, mb: int, start: str, item: str, end: str = "") -> None:
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(start)
        chunk = item * max(1, (1 << 20) // len(item))
        for _ in range(mb):
            handle.write(chunk)
        handle.write(end)


def build(root: Path, mb: int) -> list[tuple[str, Path, list[str]]]:
    """(name, case folder, baseline command) per huge input."""
    cases = []

    def case(name: str) -> Path:
        folder = root / name
        folder.mkdir()
        return folder

    c = case("levels")
    _big_yaml(c / "case.yaml", mb, HEAD + "consistency_levels_tried: [", "1, ", "1]\n")
    cases.append((f"case.yaml {mb} MB, one long consistency_levels_tried list", c,
                  ["-c", PARSE_YAML, str(c / "case.yaml")]))
    c = case("evidence")
    _big_yaml(c / "case.yaml", mb, HEAD + "evidence:\n", "  - dataset_eval\n")
    cases.append((f"case.yaml {mb} MB, a long evidence list", c,
                  ["-c", PARSE_YAML, str(c / "case.yaml")]))
    c = case("evidence_small")
    (c / "case.yaml").write_text(HEAD + "evidence:\n" + "  - dataset_eval\n" * 55_000,
                                 encoding="utf-8")
    cases.append(("case.yaml 0.9 MB (under the size limit), a long evidence list", c,
                  ["-c", PARSE_YAML, str(c / "case.yaml")]))
    c = case("metric")
    _big_yaml(c / "case.yaml", mb, "schema: qcdoctor/case-v1\nstages:\n  qat: {metric: \"",
              "mAP", "\", value: 0.5}\n")
    cases.append((f"case.yaml {mb} MB, one string in a metric name", c,
                  ["-c", PARSE_YAML, str(c / "case.yaml")]))

    run = [{"type": "convert", "baseline": "qat_bc", "analysis": "quantized_bc", "out_dir": "qa"}]
    head = HEAD + "analyses_run: " + json.dumps(run) + "\n"
    c = case("fx_graph")
    (c / "case.yaml").write_text(head, encoding="utf-8")
    n = 20_000
    nodes = [("placeholder", "input_0", "input_0", "()")]
    for i in range(n):
        nodes.append(("call_module", f"layer{i}_conv", f"backbone.layer{i}.conv", f"({nodes[-1][1]},)"))
    nodes.append(("output", "output", "output", f"(({nodes[-1][1]},),)"))
    write_fx_graph(c / "fx_graph.txt", nodes)
    # mod_names prefixed: matched to graph targets by suffix (the formerly quadratic path)
    table = write_compare(c / "qa", [layer(f"model.backbone.layer{i}.conv",
                                           0.9999 - (0.2 if i >= n // 2 else 0.0)) for i in range(n)])
    cases.append(("fx_graph.txt 20,000 nodes + a 20,000-row compare table", c,
                  ["-c", READ_FX_AND_TABLE, str(c / "fx_graph.txt"), str(table)]))
    c = case("csv")
    (c / "case.yaml").write_text(head, encoding="utf-8")
    rows = 200_000
    table = write_compare(c / "qa", [layer(f"m.l{i}", 0.9999 - (0.2 if i >= rows // 2 else 0.0))
                                     for i in range(rows)], fmt="csv")
    cases.append(("compare_per_layer_out.csv 200,000 rows (profiler layout)", c,
                  ["-c", READ_CSV, str(table)]))
    return cases


def main() -> int:
    mb = int(sys.argv[1]) if len(sys.argv) > 1 else 50
    missed = 0
    with tempfile.TemporaryDirectory(dir="/tmp") as tmp:
        cases = build(Path(tmp), mb)
        print(f"{'input':<62} {'baseline':>9} {'triage':>8} {'ratio':>7} {'peak RSS':>9}  result")
        for name, folder, baseline_cmd in cases:
            baseline = measure([sys.executable, *baseline_cmd], BASELINE_TIMEOUT)
            ours = measure([sys.executable, "-m", "qcdoctor", "triage", str(folder),
                            "--format", "json"])
            ratio = ours["wall"] / baseline["wall"]       # an upper bound if the baseline stopped
            ok = ratio <= TARGET_RATIO and ours["rss_mb"] < TARGET_MB and ours["rc"] in (0, 2)
            missed += not ok
            outcome = "answered" if ours["rc"] == 0 else f"refused (exit {ours['rc']})"
            stopped = ">" if baseline["timed_out"] else " "
            print(f"{name:<62} {stopped}{baseline['wall']:7.2f}s {ours['wall']:7.2f}s "
                  f"{'<' if stopped == '>' else ' '}{ratio:5.2f}x {ours['rss_mb']:6.0f} MB  "
                  f"{outcome}  {'OK' if ok else 'MISSED'}")
            if ours["rc"] != 0:
                print(f"{'':<62} {' '.join(ours['err'])[:110]}")
            print(f"{'':<62} baseline peak RSS {baseline['rss_mb']:.0f} MB"
                  + (f" (stopped after {BASELINE_TIMEOUT:g} s)" if baseline["timed_out"] else ""))
    print(f"targets: <= {TARGET_RATIO:g}x the baseline, < {TARGET_MB} MB; "
          f"{'all met' if not missed else f'{missed} missed'}")
    return 0 if not missed else 1


if __name__ == "__main__":
    sys.exit(main())
