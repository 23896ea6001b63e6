"""Turn a validated case (plus what the machine tells) into engine facts."""

from __future__ import annotations

import os
import warnings
from pathlib import Path

from qcdoctor.engine.fact_types import PACKAGES, USER_CHECKS
from qcdoctor.engine.vocabulary import analysis_type, needs_two_runs, torch_vs_bc

from .case_file import Case
from .deploy_facts import collect_deploy
from .dump_facts import collect_dumps
from .environment import detect_march, installed_versions
from .files import CaseFiles
from .platform import platform_fact
from .quant_analysis import collect_quant_analysis
from .series import split_series
from .stages import derive_stage_facts
from .threshold_settings import resolve as resolve_thresholds
from .versions import version_fact

SUFFICIENT_EVIDENCE = ("dataset_eval", "reproducible_badcase", "multi_frame_visual")


def case_fact(case: Case) -> dict:
    deploy = case.get("deploy", {})
    return {"type": "case", "symptom_given": bool(case.get("symptom", "").strip()),
            "badcase": case.get("badcase", "unknown"), "retrain": case.get("retrain", "unknown"),
            "fake_quant_state": case.get("fake_quant_state", "unknown"),
            "input_format_differs": case.get("input_format_differs", False),
            "has_task_input": case.get("has_task_input", False),
            "postprocess_in_model": case.get("postprocess_in_model", "unknown"),
            "deploy_given": any(k in deploy for k in ("train", "board", "nodes", "description",
                                                       "script")),
            "language": case.get("language", "zh"), "source": case.source("case")}


def evidence_facts(case: Case) -> list[dict]:
    kinds = case.get("evidence", [])
    src = case.source("evidence")
    facts = [{"type": "evidence", "kind": k, "source": src} for k in dict.fromkeys(kinds)]
    sufficient = any(k in SUFFICIENT_EVIDENCE for k in kinds)
    facts.append({"type": "evidence_summary", "given": bool(kinds), "sufficient": sufficient,
                  "single_frame_only": bool(kinds) and not sufficient, "source": src})
    return facts


def platform_facts(case: Case, board: tuple[str, str] | None) -> list[dict]:
    given = case.get("platform", {})
    if given:
        return [platform_fact(given.get("chip"), given.get("march"), case.source("platform"))]
    if board:
        return [platform_fact(None, board[0], board[1])]
    return [platform_fact(None, None, "not given")]


def version_facts(case: Case, installed: dict | None) -> list[dict]:
    given = case.get("versions", {})
    installed = installed_versions() if installed is None else installed
    facts = []
    for package in PACKAGES:
        if package in given:
            facts.append(version_fact(package, given[package], case.source(f"versions.{package}")))
        elif package in installed:
            facts.append(version_fact(package, *installed[package]))
        else:
            facts.append(version_fact(package, None, "not given"))
    return facts


def user_check_facts(case: Case) -> list[dict]:
    given = case.get("user_checks", {})
    facts = [{"type": "user_check", "check": c, "value": given.get(c, "unknown"),
              "source": case.source(f"user_checks.{c}") if c in given else "not given"}
             for c in USER_CHECKS]
    values = [f["value"] for f in facts]
    facts.append({"type": "user_checks_summary", "any_failed": "no" in values,
                  "all_confirmed": all(v == "yes" for v in values),
                  "source": case.source("user_checks")})
    return facts


# knowledge.md §7: OE 3.5.0 numbered the levels 0-4. Old 2 is new 1, old 4 new 2; old 1
# and 3 were dropped and count as the new level just below them ("a level between").
OLD_LEVELS = {0: 0, 1: 0, 2: 1, 3: 1, 4: 2}
OLD_BETWEEN = (1, 3)


def consistency_numbering(case: Case) -> str:
    """``old`` when the case says so or uses a level (3, 4) only the old numbering has."""
    values = set(case.get("consistency_levels_tried", []))
    if case.get("consistency_level") is not None:
        values.add(case.get("consistency_level"))
    if case.get("consistency_numbering") == "old" or values & {3, 4}:
        return "old"
    return "new"


def consistency_fact(case: Case) -> dict:
    current = case.get("consistency_level")
    given = list(case.get("consistency_levels_tried", []))
    if current is not None:
        given.append(current)
    numbering = consistency_numbering(case)
    old = numbering == "old"
    tried = {OLD_LEVELS[v] for v in given} if old else set(given)
    if current is not None and old:
        current = OLD_LEVELS[current]
    return {"type": "consistency_history", "current": -1 if current is None else current,
            "highest_tried": max(tried, default=-1), "tried_0": 0 in tried, "tried_1": 1 in tried,
            "tried_2": 2 in tried, "any": bool(tried), "numbering": numbering,
            "old_levels": ", ".join(str(v) for v in sorted(set(given))) if old else "",
            "between": old and any(v in OLD_BETWEEN for v in given),
            "source": case.source("consistency_levels_tried")}


def analysis_facts(case: Case) -> list[dict]:
    facts, summary = [], {}
    for i, run in enumerate(case.get("analyses_run", [])):
        kind = analysis_type(run.get("type"), run["analysis"])
        facts.append({"type": "analysis_run", "analysis_model_type": kind,
                      "baseline": run["baseline"], "analysis": run["analysis"],
                      "sensitivity": run.get("sensitivity", False),
                      "separate_runs": run.get("separate_runs", False),
                      "out_dir": run.get("out_dir", ""),
                      "mixes_torch_and_bc": torch_vs_bc(run["baseline"], run["analysis"]),
                      "needs_two_runs": needs_two_runs(
                          run["baseline"], run["analysis"],
                          case.get("input_format_differs", False),
                          case.get("has_task_input", False)),
                      "source": case.source(f"analyses_run[{i}].baseline")})
        runs, sens = summary.get(kind, (0, False))
        summary[kind] = (runs + 1, sens or run.get("sensitivity", False))
    facts += [{"type": "analysis_summary", "analysis_model_type": kind, "runs": runs,
               "with_sensitivity": sens, "source": case.source("analyses_run")}
              for kind, (runs, sens) in sorted(summary.items())]
    return facts


def collect_facts(case: Case, **options) -> list[dict]:
    """Every fact of a case, for the rules (see ``collect_case``)."""
    return collect_case(case, **options)[0]


def collect_case(case: Case, *, environ=None, cwd: Path | None = None,
                 installed: dict | None = None, trust_pickles: bool = False,
                 progress=None, use_env: bool = True,
                 files: CaseFiles | None = None, thresholds=None
                 ) -> tuple[list[dict], list[dict]]:
    """(facts, plot series) of a case; ``environ``/``installed`` are injectable for tests.

    ``use_env=False`` (``--no-env``): nothing from this machine, only the case folder.
    Every artifact is read through ``files`` (by default: nothing outside the case
    folder); what it refused is reported as unreadable artifacts.
    """
    environ = os.environ if environ is None else environ
    if not use_env:
        installed = {}
    files = files or CaseFiles(case.folder)
    thresholds = thresholds or resolve_thresholds(case, use_env)[0]
    board = detect_march(case.folder, cwd, environ, use_env, files)   # the board's march
    platform = platform_facts(case, board)
    with warnings.catch_warnings():
        # numeric overflow in hostile tables or dumps is handled where it matters
        # (non-finite values are skipped or reported); numpy's warnings are noise here
        warnings.simplefilter("ignore", RuntimeWarning)
        dumps = collect_dumps(case, trust_pickles, progress, files)
        artifacts = (collect_quant_analysis(case, trust_pickles, thresholds, files)
                     + collect_deploy(case, platform[0], board, files) + dumps)
    # dumps of the same input stand in for missing stage results (knowledge.md §5 rev 2)
    dump_pairs = [f for f in dumps if f["type"] == "dump_pair"]
    artifacts, series = split_series(artifacts)
    return (derive_stage_facts(case, dump_pairs) + [case_fact(case)] + evidence_facts(case)
            + platform + version_facts(case, installed)
            + user_check_facts(case) + [consistency_fact(case)] + analysis_facts(case)
            + artifacts + files.problem_facts()), series
