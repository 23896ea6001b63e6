"""Stage facts from the dumps named in ``artifacts.dumps``: x86 vs board, bc vs hbm."""

from __future__ import annotations

import math
import os
from pathlib import Path

from qcdoctor.collectors.case_file import Case
from qcdoctor.collectors.files import ArtifactRefused, CaseFiles
from qcdoctor.collectors.reasons import Reason, artifact_problem, zh
from qcdoctor.errors import QcdoctorError
from qcdoctor.fact_types import STAGES


def collect_dumps(case: Case, trust_pickles: bool = False, progress=None,
                  files: CaseFiles | None = None) -> list[dict]:
    named = case.get("artifacts", {}).get("dumps", {})
    if not named or case.folder is None:
        return []
    from qcdoctor.collectors.dumps import compare_paths  # numpy loads only when there are dumps
    from qcdoctor.collectors.series import dump_series
    files = files or CaseFiles(case.folder)
    where = case.source("artifacts.dumps")
    dtype = case.get("artifacts", {}).get("dump_dtype")
    stages = [s for s in STAGES if s in named]
    facts = []
    for left, right in zip(stages, stages[1:], strict=False):   # adjacent pairs
        source = f"{named[left]} vs {named[right]}"
        try:
            paths = [case.folder / named[side] for side in (left, right)]
            for path in paths:
                files.folder_path(path, where)
            results = compare_paths(*paths, dtype=dtype, trust_pickles=trust_pickles,
                                    progress=progress,
                                    guard=lambda p, kind: files.check(p, kind, where))
        except ArtifactRefused:
            continue
        except QcdoctorError as exc:
            facts.append(artifact_problem(source, _first_line(exc, case.folder), False,
                                          case.source("artifacts.dumps")))
            continue
        compared = [r for r in results if "missing" not in r and not r["shape_mismatch"]]
        worst = min(compared, key=lambda r: r["cosine"], default=None)
        facts.append({"type": "dump_pair", "left": left, "right": right,
                      "outputs": len(results), "compared": len(compared),
                      "identical": "yes" if compared and len(compared) == len(results) and
                      all(r["identical"] for r in compared) else
                      ("no" if compared or any(r.get("shape_mismatch") for r in results) else "unknown"),
                      "consistent": "yes" if compared and len(compared) == len(results) and
                      all(r["consistent"] for r in compared) else
                      ("no" if compared or any(r.get("shape_mismatch") for r in results) else "unknown"),
                      "worst_output": worst["output"] if worst else "",
                      "min_cosine": _finite(worst["cosine"]) if worst else 0.0,
                      "max_abs": _finite(max((r["max_abs"] for r in compared), default=0.0)),
                      "shape_mismatch": any(r.get("shape_mismatch") or "missing" in r for r in results),
                      "source": source})
        facts.append(dump_series(results, left, right, source))
    return facts


def _finite(value) -> float:
    return float(value) if value is not None and math.isfinite(value) else 0.0


def _first_line(exc: QcdoctorError, folder: Path | None = None) -> Reason:
    """The error's first line (the file it is about, then why), in both languages; a file
    in the case folder named relative to it (the report names the case's files so, and a
    long temporary folder never pushes the reason out)."""
    path = getattr(exc, "path", None)
    if folder is not None and path and os.path.abspath(path).startswith(
            os.path.abspath(folder) + os.sep):
        where = os.path.relpath(path, folder) + (f":{exc.line}" if exc.line else "")
        return Reason(f"{where}: {exc.problem}", f"{where}: {zh(exc.problem)}")
    first = exc.render().splitlines()[0]
    problem = str(exc.problem)
    if problem and first.endswith(problem):
        return Reason(first, first[:len(first) - len(problem)] + zh(exc.problem))
    return Reason(first, first)
