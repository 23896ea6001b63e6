"""Turn a validated case (plus what the machine tells) into engine facts."""

from __future__ import annotations

import os
import warnings
from pathlib import Path

from qcdoctor.collectors.case_file import Case
from qcdoctor.collectors.deploy_facts import collect_deploy, read_deploy_files, stated_march
from qcdoctor.collectors.dump_facts import collect_dumps
from qcdoctor.collectors.environment import detect_march, installed_versions
from qcdoctor.collectors.files import CaseFiles
from qcdoctor.collectors.platform import platform_fact
from qcdoctor.collectors.prepare_environment import with_prepare_environment, with_prepare_march
from qcdoctor.collectors.qa_files import COMPARE_NAMES, SENSITIVITY_RE
from qcdoctor.collectors.quant_analysis import collect_quant_analysis, named_runs, place_folders
from qcdoctor.collectors.series import split_series
from qcdoctor.collectors.stages import derive_stage_facts
from qcdoctor.collectors.threshold_sources import resolve as resolve_thresholds
from qcdoctor.collectors.versions import version_fact
from qcdoctor.fact_types import PACKAGES, USER_CHECKS
from qcdoctor.source_locations import at, case_key, joined
from qcdoctor.vocabulary import analysis_type, needs_two_runs, torch_vs_bc

SUFFICIENT_EVIDENCE = ("dataset_eval", "reproducible_badcase", "multi_frame_visual")
BADCASE_EVIDENCE = "reproducible_badcase"


def searched_badcases(artifacts: list[dict]) -> list[dict]:
    """The probe's bad-case searches in the case folder that found the output error on at
    least one sample: each is a stable, reproducible bad case (knowledge.md §3, §4), its
    index named and its inputs replayable from the samples searched."""
    return [f for f in artifacts if f["type"] == "sample_search" and f["shown"] != "none"]


def case_fact(case: Case, artifacts: list[dict] = ()) -> dict:
    """What case.yaml says of the case; its bad case ``available`` where a probe's search in
    the folder found one, whatever case.yaml says (the folder shows it: the rules that ask
    for a bad case, or hold QuantAnalysis back without one, read this one field)."""
    deploy = case.get("deploy", {})
    badcase = "available" if searched_badcases(artifacts) else case.get("badcase", "unknown")
    return {"type": "case", "symptom_given": bool(case.get("symptom", "").strip()),
            "badcase": badcase, "retrain": case.get("retrain", "unknown"),
            "fake_quant_state": case.get("fake_quant_state", "unknown"),
            "input_format_differs": case.get("input_format_differs", False),
            "has_task_input": case.get("has_task_input", False),
            "postprocess_in_model": case.get("postprocess_in_model", "unknown"),
            "deploy_given": any(k in deploy for k in ("train", "board", "nodes", "description",
                                                       "script")),
            # the deploy keys holding a value: the checklist never asks for them again
            "deploy_keys": ", ".join(_filled_keys(deploy, "deploy")),
            "language": case.get("language", "zh"), "source": case.source("case"),
            "locations": case_key(case, "case")}


def _filled_keys(value, path: str) -> list[str]:
    """The dotted paths under ``value`` that hold a value (a mapping's own path too)."""
    if not isinstance(value, dict):
        return [path] if value is not None and value != "unknown" else []
    return [path] + [key for name, inner in value.items()
                     for key in _filled_keys(inner, f"{path}.{name}")] if value else []


def evidence_facts(case: Case, artifacts: list[dict] = ()) -> list[dict]:
    """The kinds of evidence case.yaml states, and those the case folder shows: a probe's
    bad-case search that found the output error on at least one sample is a stable,
    reproducible bad case (knowledge.md §3), whatever case.yaml says (a kind it states
    too keeps case.yaml's provenance)."""
    kinds = case.get("evidence", [])
    src, where = case.source("evidence"), case_key(case, "evidence")
    facts = [{"type": "evidence", "kind": k, "source": src, "locations": where}
             for k in dict.fromkeys(kinds)]
    searched = searched_badcases(artifacts)
    if searched and BADCASE_EVIDENCE not in kinds:
        facts.append({"type": "evidence", "kind": BADCASE_EVIDENCE,
                      "source": "; ".join(f["source"] for f in searched),
                      "locations": joined(*searched)})
    kinds = [f["kind"] for f in facts]
    sufficient = any(k in SUFFICIENT_EVIDENCE for k in kinds)
    stated = [src] if case.get("evidence") else []
    facts.append({"type": "evidence_summary", "given": bool(kinds), "sufficient": sufficient,
                  "single_frame_only": bool(kinds) and not sufficient,
                  "source": "; ".join(stated + [f["source"] for f in searched]) or src,
                  "locations": joined(where, *searched)})
    return facts


def platform_facts(case: Case, board: tuple[str, str] | None,
                   board_locations: list[dict] = ()) -> list[dict]:
    given = case.get("platform", {})
    if given:
        return [{**platform_fact(given.get("chip"), given.get("march"), case.source("platform")),
                 "locations": case_key(case, "platform")}]
    if board:
        return [{**platform_fact(None, board[0], board[1]), "locations": list(board_locations)}]
    return [platform_fact(None, None, "not given")]


def version_facts(case: Case, installed: dict | None) -> list[dict]:
    given = case.get("versions", {})
    installed = installed_versions() if installed is None else installed
    facts = []
    for package in PACKAGES:
        if package in given:
            facts.append({**version_fact(package, given[package],
                                         case.source(f"versions.{package}")),
                          "locations": case_key(case, f"versions.{package}")})
        elif package in installed:
            facts.append(version_fact(package, *installed[package]))
        else:
            facts.append(version_fact(package, None, "not given"))
    return facts


def user_check_facts(case: Case) -> list[dict]:
    given = case.get("user_checks", {})
    facts = [{"type": "user_check", "check": c, "value": given.get(c, "unknown"),
              "source": case.source(f"user_checks.{c}") if c in given else "not given",
              "locations": case_key(case, f"user_checks.{c}") if c in given else []}
             for c in USER_CHECKS]
    values = [f["value"] for f in facts]
    facts.append({"type": "user_checks_summary", "any_failed": "no" in values,
                  "all_confirmed": all(v == "yes" for v in values),
                  "source": case.source("user_checks"),
                  "locations": case_key(case, "user_checks")})
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
            "source": case.source("consistency_levels_tried"),
            "locations": case_key(case, "consistency_levels_tried")}


def analysis_facts(case: Case, sensitivity_in: frozenset[str] = frozenset(),
                   absent: dict[str, str] | None = None,
                   sibling_in: frozenset[str] = frozenset(),
                   named: tuple[dict, ...] = ()) -> list[dict]:
    """The analyses_run entries, then ``named``: the runs folders' names state (knowledge.md
    §18 R5.8, read as declared ones, located at their folder). ``sensitivity_in``: the
    folders whose sensitivity ran by their own files (tables, or the probe's manifest),
    which count as run whatever the entry says (knowledge.md §16 R3.10). ``absent``: out_dir (normalised) -> why it holds
    no readable output. Such an entry counts as not run (R3.4): it stays a declared run
    (what the user did, which pitfalls read) but is left out of the summary that tells
    an analysis as done, and an ``analysis_absent`` fact names its folder.
    ``sibling_in``: the folders another folder of whose comparison ran a sensitivity;
    the summary counts it as this comparison's (knowledge.md §17 R4.7), the entry keeps
    what its own run did."""
    facts, summary, gone = [], {}, []
    ran = {os.path.normpath(folder) for folder in sensitivity_in}
    siblings = {os.path.normpath(folder) for folder in sibling_in}
    declared = case.get("analyses_run", [])
    for i, run in enumerate([*declared, *named]):
        key = f"analyses_run[{i}].baseline" if i < len(declared) else None
        kind = analysis_type(run.get("type"), run["analysis"])
        problem = (absent or {}).get(os.path.normpath(str(run.get("out_dir") or ".")))
        if problem and run.get("out_dir"):
            gone.append(_absent_fact(case, i, run, kind, problem))
        sensitivity = run.get("sensitivity", False) or bool(
            run.get("out_dir") and os.path.normpath(str(run["out_dir"])) in ran)
        facts.append({"type": "analysis_run", "analysis_model_type": kind,
                      "baseline": run["baseline"], "analysis": run["analysis"],
                      "sensitivity": sensitivity,
                      "separate_runs": run.get("separate_runs", False),
                      "out_dir": run.get("out_dir", ""),
                      "mixes_torch_and_bc": torch_vs_bc(run["baseline"], run["analysis"]),
                      "needs_two_runs": needs_two_runs(
                          run["baseline"], run["analysis"],
                          case.get("input_format_differs", False),
                          case.get("has_task_input", False)),
                      "source": case.source(key) if key else run["out_dir"],
                      "locations": case_key(case, key) if key else at(run["out_dir"])})
        if problem and run.get("out_dir"):
            continue
        by_sibling = bool(run.get("out_dir") and os.path.normpath(str(run["out_dir"])) in siblings)
        runs, sens = summary.get(kind, (0, False))
        summary[kind] = (runs + 1, sens or sensitivity or by_sibling)
    facts += [{"type": "analysis_summary", "analysis_model_type": kind, "runs": runs,
               "with_sensitivity": sens, "source": case.source("analyses_run"),
               "locations": case_key(case, "analyses_run")}
              for kind, (runs, sens) in sorted(summary.items())]
    folders = ", ".join(dict.fromkeys(f["out_dir"] for f in gone))
    return facts + [{**f, "folders": folders} for f in gone]


def _absent_fact(case: Case, index: int, run: dict, kind: str, problem: str) -> dict:
    return {"type": "analysis_absent", "analysis_model_type": kind,
            "baseline": run["baseline"], "analysis": run["analysis"],
            "out_dir": str(run["out_dir"]), "problem": problem,
            "source": case.source(f"analyses_run[{index}].out_dir"),
            "locations": case_key(case, f"analyses_run[{index}].out_dir")}


def absent_outputs(case: Case, files: CaseFiles, artifacts: list[dict]) -> dict[str, str]:
    """knowledge.md §16 R3.4: out_dir (normalised) -> why the analyses_run entry naming it
    has no readable output: ``folder_missing``, ``folder_outside`` (refused),
    ``folder_empty`` (no QuantAnalysis file), ``tables_unreadable`` (none of its tables
    could be read) or ``folder_not_read`` (not among artifacts.quant_analysis)."""
    if case.folder is None or not case.folder.is_dir():
        return {}           # a case with no folder of its own has no outputs to look for
    # a folder is read when its per-layer table or one of its sensitivity tables was
    readable = {os.path.normpath(f["analysis"]): f["has_compare"]
                for f in artifacts if f["type"] == "qa_folder"}
    for fact in artifacts:
        if fact["type"] == "sensitivity_summary" and \
                os.path.normpath(fact["analysis"]) in readable:
            readable[os.path.normpath(fact["analysis"])] = True
    out = {}
    for run in case.get("analyses_run", []):
        if not run.get("out_dir"):
            continue
        key = os.path.normpath(str(run["out_dir"]))
        problem = _output_problem(case.folder / key, readable.get(key), files)
        if problem:
            out[key] = problem
    return out


def _output_problem(folder: Path, readable: bool | None, files: CaseFiles) -> str:
    if readable is not None:            # the QuantAnalysis collector read the folder
        return "" if readable else "tables_unreadable"
    if not files.inside(folder):
        return "folder_outside"
    if not folder.is_dir():
        return "folder_missing"
    return "folder_not_read" if holds_qa_output(folder) else "folder_empty"


def holds_qa_output(folder: Path) -> bool:
    """A table QuantAnalysis (or qcdoctor probe) writes, directly in ``folder``."""
    try:
        found = [p.name for p in folder.iterdir()]
    except OSError:
        return False
    return any(n in COMPARE_NAMES or SENSITIVITY_RE.match(n) for n in found)


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
    board_places = getattr(board, "locations", [])
    platform = platform_facts(case, board, board_places)
    deploy_files = read_deploy_files(case, files)
    stated = None if platform[0]["known"] else stated_march(deploy_files)
    if stated:
        # the march the user's own script or config deploys to names the platform when
        # neither case.yaml nor a board file does
        march, source, places = stated
        platform = [{**platform_fact(None, march, source), "locations": places}]
    with warnings.catch_warnings():
        # numeric overflow in hostile tables or dumps is handled where it matters
        # (non-finite values are skipped or reported); numpy's warnings are noise here
        warnings.simplefilter("ignore", RuntimeWarning)
        dumps = collect_dumps(case, trust_pickles, progress, files)
        # the QAT input scale is looked up only where a board scale waits for it
        sides = case.get("deploy", {})
        input_scales: list[tuple[float, str, list[dict]]] | None = (
            [] if "input_scale" in sides.get("board", {})
            and "input_scale" not in sides.get("train", {}) else None)
        artifacts = (collect_quant_analysis(case, trust_pickles, thresholds, files, input_scales)
                     + collect_deploy(case, platform[0], board, files, board_places,
                                      read=deploy_files, platform_from_deploy=bool(stated),
                                      profiler_scale=one_input_scale(input_scales or []))
                     + dumps)
    # dumps of the same input stand in for missing stage results (knowledge.md §5 rev 2)
    dump_pairs = [f for f in dumps if f["type"] == "dump_pair"]
    for pair in dump_pairs:
        pair["locations"] = joined(*(case_key(case, f"artifacts.dumps.{pair[side]}")
                                     for side in ("left", "right")))
    artifacts, series = split_series(artifacts)
    # what prepare said it ran with (model_check_result): versions, march
    checks = iter(with_prepare_march([f for f in artifacts if f["type"] == "march_check"],
                                     artifacts))
    artifacts = [next(checks) if f["type"] == "march_check" else f for f in artifacts]
    stages = with_stage_locations(derive_stage_facts(case, dump_pairs), case, dump_pairs)
    place_folders(artifacts, stages, case)
    return (stages + [case_fact(case, artifacts)] + evidence_facts(case, artifacts)
            + with_prepare_environment(platform + version_facts(case, installed), artifacts)
            + user_check_facts(case) + [consistency_fact(case)]
            + analysis_facts(case, _sensitivity_folders(artifacts),
                             absent_outputs(case, files, artifacts),
                             _sibling_sensitivity_folders(artifacts),
                             tuple(named_runs(artifacts, case)))
            + artifacts + _located_problems(case, files.problem_facts())), series


def one_input_scale(found: list[tuple[float, str, list[dict]]]
                    ) -> tuple[float, str, list[dict]] | None:
    """The input QuantStub scale the QuantAnalysis outputs agree on, or None when they
    give none or several (a model with several inputs: which one the board feeds is not
    known)."""
    distinct = []
    for entry in found:
        if not any(abs(entry[0] - d[0]) <= 1e-6 * max(abs(d[0]), 1e-12) for d in distinct):
            distinct.append(entry)
    return distinct[0] if len(distinct) == 1 else None


def _sensitivity_folders(artifacts: list[dict]) -> frozenset[str]:
    return frozenset(f["analysis"] for f in artifacts
                     if f["type"] == "qa_folder" and f.get("sensitivity_ran"))


def _sibling_sensitivity_folders(artifacts: list[dict]) -> frozenset[str]:
    return frozenset(f["analysis"] for f in artifacts
                     if f["type"] == "qa_folder" and f.get("sibling_sensitivity"))


# the stages each fact derived from the stage table compares (derive_stage_facts)
_STAGE_FIELDS = {"calib_recovered": (), "stage_rise": ("before", "after"),
                 "transition": ("from", "to"), "non_monotonic": ("abnormal", "normal"),
                 "further_drop": ("from", "to"), "metric_scale": ("high", "low")}


def with_stage_locations(facts: list[dict], case: Case, dump_pairs: list[dict]) -> list[dict]:
    """The stage facts with their locations: a stage result where case.yaml gives it (or
    the dumps that stood in for it), a fact comparing stages where those stand."""
    given = case.get("stages", {})
    identical = joined(*(p for p in dump_pairs
                         if (p["left"], p["right"]) == ("hbm_x86", "board")))
    of_stage: dict[str, list[dict]] = {}
    for fact in facts:
        if fact["type"] == "stage":
            stage = fact["stage"]
            if fact.get("basis") == "dump_identical":
                places = identical
            else:
                places = case_key(case, f"stages.{stage}") if stage in given else []
            of_stage[stage] = fact["locations"] = places
    for fact in facts:
        fields = _STAGE_FIELDS.get(fact["type"])
        if fields is not None:
            stages = [fact[f] for f in fields] if fields else ["calib", "qat"]
            fact["locations"] = joined(*(of_stage.get(s, []) for s in stages))
    return facts


def _located_problems(case: Case, problems: list[dict]) -> list[dict]:
    """The artifacts ``files`` refused, located at the artifact when it lies in the case
    folder, else at the case file that led to it."""
    return [{**p, "locations": at(p["file"]) or case_key(case)} if "locations" not in p else p
            for p in problems]
