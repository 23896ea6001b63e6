"""One case from folder to Diagnosis: load, collect facts, run the rules, build the report."""

from __future__ import annotations

from pathlib import Path

from qcdoctor.collectors.case import Case
from qcdoctor.collectors.files import CaseFiles, list_case_files
from qcdoctor.engine.diagnosis.diagnose import build_report, bundled_runner, run_rules
from qcdoctor.engine.matching.runner import EngineFailure, RuleRunner


def case_context(case: Case, facts: list[dict]) -> dict:
    """What generated code needs from the case."""
    platform = next((f for f in facts if f["type"] == "platform"), {})
    plugin = next((f for f in facts if f["type"] == "version"
                   and f["package"] == "horizon-plugin-pytorch"), {})
    return {"march": platform.get("march", "unknown"),
            # the level numbering of the user's plugin: 0-4 before 3.1.2, 0-2 from it
            "plugin_numbering": {"yes": "new", "no": "old"}.get(plugin.get("meets"), "unknown"),
            "input_format_differs": case.get("input_format_differs", False),
            "has_task_input": case.get("has_task_input", False),
            "badcase": case.get("badcase", "unknown"),
            # folders the user already gave each analysis type, reused in generated code
            "out_dirs": {run.get("type"): run["out_dir"] for run in case.get("analyses_run", [])
                         if run.get("type") and run.get("out_dir")}}


def triage_case(case: Case, *, lang: str | None = None, runner: RuleRunner | None = None,
                environ=None, cwd: Path | None = None, installed: dict | None = None,
                display_path: str | None = None, trust_pickles: bool = False,
                full_checklist: bool = False, progress=None, use_env: bool = True,
                case_files: CaseFiles | None = None,
                collected: tuple[list[dict], list[dict]] | None = None,
                thresholds_resolved: tuple | None = None) -> dict:
    """``case_files`` says what may be read (default: the case folder only) and keeps
    what was read, so callers can protect those files. ``collected``: the case's (facts,
    plot series) when already collected (``collectors.background``); the collection
    options then go unused; ``thresholds_resolved``: (thresholds, sources) that collection
    was read with, when known."""
    runner = runner or bundled_runner()
    runner.warm()           # the engine worker starts while the facts are collected
    if thresholds_resolved is None:
        from qcdoctor.collectors.threshold_sources import resolve as resolve_thresholds
        thresholds_resolved = resolve_thresholds(case, use_env)
    if collected is None:
        from qcdoctor.collectors.case_facts import collect_case
        collected = collect_case(case, environ=environ, cwd=cwd, installed=installed,
                                 trust_pickles=trust_pickles, progress=progress,
                                 use_env=use_env, files=case_files or CaseFiles(case.folder),
                                 thresholds=thresholds_resolved[0])
    facts, series = collected
    try:
        hits = run_rules(facts, runner)
    except EngineFailure as failure:
        failure.file = str(case.file or case.folder or "") or None    # name the case
        raise
    return case_report(case, facts, series, hits, thresholds_resolved, lang=lang,
                       display_path=display_path, full_checklist=full_checklist)


def case_report(case: Case, facts: list[dict], series: list[dict], hits: list,
                thresholds_resolved: tuple, *, lang: str | None = None,
                display_path: str | None = None, full_checklist: bool = False) -> dict:
    """The Diagnosis of a case from its facts and the rules' hits."""
    thresholds, threshold_sources = thresholds_resolved
    from qcdoctor.engine.reports.locale_language import chosen_language
    lang = chosen_language(lang, case.get("language"))
    info = {"path": display_path or str(case.folder or "-"), "title": case.get("title", "")}
    report = build_report(facts, hits, lang=lang, case_info=info,
                          case_context=case_context(case, facts),
                          files=list_case_files(case.folder), full_checklist=full_checklist,
                          series=series)
    if "thresholds" in report:          # the values this case was read with, and from where
        report["thresholds"] = thresholds.as_dict()
        report["threshold_sources"] = threshold_sources
    return report


def triage_path(path: str | Path, *, allow_outside=(), **kwargs) -> dict:
    """The report of a case folder, a case.yaml or a support bundle (extracted for the time
    of it, and named in the report as given); ``allow_outside``: folders outside the case
    whose artifacts may be read; the rest as ``triage_case``."""
    from qcdoctor.collectors.bundle import is_bundle, opened_bundle
    from qcdoctor.collectors.case_file import load_case
    from qcdoctor.errors import QcdoctorError
    path = Path(path)
    if is_bundle(path):
        kwargs.setdefault("display_path", str(path))
        with opened_bundle(path) as folder:
            try:
                return triage_path(folder, allow_outside=allow_outside, **kwargs)
            except QcdoctorError as exc:     # named as the bundle's member, not a temp file
                raise exc.inside_bundle(folder, path) from None
    case = load_case(path, tuple(map(Path, allow_outside)))
    return triage_case(case, case_files=CaseFiles(case.folder, tuple(map(Path, allow_outside))),
                       **kwargs)
