"""Benchmark: a cold ``qcdoctor triage`` of a case without QuantAnalysis tables or dumps,
against the import of the libraries such a triage needs, measured in the same run.

- subject: ``qcdoctor triage --example board_only --format md`` (``--example`` picks
  another bundled case), the installed console script in a fresh process each time,
  with everything it starts: the forked child reading the case and the engine worker.
- baseline: ``python -c "import yaml, jinja2, durable_rules_engine"`` in a fresh process:
  the case reader's YAML, the report's templates and the rule engine (durable_rules'
  C module, all the engine worker imports of it), with the interpreter's start.

Both run in turns (each sees the same load on a busy machine), ``--runs`` times after one
warm-up each; printed are min and median, the ratio median / median and the target:
the triage within 2x the baseline (the exit status). qcdoctor's modules are compiled to
bytecode first, as an install does (a cold start timed under PYTHONDONTWRITEBYTECODE
would otherwise time the compiler). One more triage under ``python -X importtime``,
whose forked children report into the same stream, tells whether numpy or pandas was
imported anywhere in it: a case without tables needs neither (target: none).

Run: python bench/bench_cold_triage.py [--example board_only] [--runs 15]
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from timing import byte_compiled, interleaved  # noqa: E402

TARGET = 2.0
LIBRARIES = "import yaml, jinja2, durable_rules_engine"
HEAVY = ("numpy", "pandas")
# the installed console script, as users run it (the -c form where it is not installed)
_SCRIPT = Path(sys.executable).with_name("qcdoctor")
QCDOCTOR = ([str(_SCRIPT)] if _SCRIPT.is_file() else
            ["-c", "import sys; from qcdoctor.engine.commands.cli import entry; "
                   "entry(sys.argv[1:])"])


def run(cmd: list[str]):
    return lambda: subprocess.run(cmd, check=True, capture_output=True)


def verdict(ok: bool) -> str:
    return "OK" if ok else "MISSED"


def heavy_imports(triage: list[str]) -> list[str]:
    """The modules of HEAVY imported by the triage or any process it forked."""
    done = subprocess.run([sys.executable, "-X", "importtime", *triage], check=True,
                          capture_output=True, text=True)
    found = re.findall(r"^import time:.*\|\s*(\w+)\s*$", done.stderr, re.M)
    return sorted(set(found) & set(HEAVY))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--example", default="board_only",
                        help="a bundled example without tables (qcdoctor examples)")
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args(argv)
    print(f"bytecode: {byte_compiled()} package folders compiled, as an install does")
    triage = [*QCDOCTOR, "triage", "--example", args.example, "--format", "md"]
    baseline, subject = run([sys.executable, "-c", LIBRARIES]), run([sys.executable, *triage])
    baseline(), subject()                                   # warm-up: the file cache
    (base_min, base_med), (lo, med) = interleaved(baseline, subject, runs=args.runs)
    ratio = med / base_med
    print(f"baseline {LIBRARIES!r}: min {base_min * 1e3:6.0f} ms, median "
          f"{base_med * 1e3:6.0f} ms")
    print(f"cold triage --example {args.example}: min {lo * 1e3:6.0f} ms, median "
          f"{med * 1e3:6.0f} ms = {ratio:4.2f}x baseline (min {lo / base_min:4.2f}x)  "
          f"target <= {TARGET:g}x: {verdict(ratio <= TARGET)}")
    heavy = heavy_imports(triage)
    print(f"imports of the cold triage (forked reader and engine worker included): "
          f"{', '.join(heavy) or 'neither numpy nor pandas'}  target none: "
          f"{verdict(not heavy)}")
    return 0 if ratio <= TARGET and not heavy else 1


if __name__ == "__main__":
    sys.exit(main())
