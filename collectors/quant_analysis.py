"""QuantAnalysis outputs in a case folder: find them, read them, derive per-folder facts.

Every file that cannot be read, or only in part, becomes an ``artifact_problem`` fact:
the report says what is missing instead of the run failing.
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path

from qcdoctor.collectors.advisor import load_advisor
from qcdoctor.collectors.badcase import spread_fact, worst_indices_from_pt, worst_indices_from_txt
from qcdoctor.collectors.case_file import Case
from qcdoctor.collectors.files import ArtifactRefused, CaseFiles, find_files, walk
from qcdoctor.collectors.model_check import read_model_check
from qcdoctor.collectors.model_match import model_match_facts
from qcdoctor.collectors.prepare_environment import prepare_facts
from qcdoctor.collectors.qa_files import (
    ADVISOR_NAMES,
    BADCASE_NAMES,
    COMPARE_NAMES,
    FIX_TRIALS,
    PROBE_MANIFEST,
    SAMPLE_ERRORS,
    SENSITIVITY_RE,
    load_probe_manifest,
    run_for,
)
from qcdoctor.collectors.reading.fx_graph import Graph, load_graph
from qcdoctor.collectors.reading.shared_calls import shared_call_facts
from qcdoctor.collectors.reading.thresholds import DEFAULT, Thresholds
from qcdoctor.collectors.reasons import (
    Reason,
    artifact_problem,
    joined,
    of_exception,
    reason,
    with_fix,
    zh,
)
from qcdoctor.collectors.statistic import load_statistic, weight_fact
from qcdoctor.collectors.tables import TableRefused
from qcdoctor.errors import QcdoctorError
from qcdoctor.fact_types import FACT_TYPES, STAGES
from qcdoctor.source_locations import at, case_key
from qcdoctor.vocabulary import ANALYSIS_TYPE_STAGES, analysis_type, needs_two_runs

_MARKERS = COMPARE_NAMES + ADVISOR_NAMES + BADCASE_NAMES
MAX_DEPTH = 4
# knowledge.md §18 R5.8: a folder named ``<baseline>_vs_<analysis>`` compares those stages in
# that order; each side is spelled as the guides spell it (compared without "_", "-", ".")
_STAGE_WORDS = {"float": "float", "floatpt": "float", "fp": "float", "fp32": "float",
                "calib": "calib", "calibpt": "calib", "calibration": "calib",
                "qat": "qat", "qatpt": "qat",
                "qatexport": "qat_export", "qatexportpt": "qat_export",
                "preexport": "qat_export", "preexportpt": "qat_export",
                "qatbc": "qat_bc", "quantizedbc": "quantized_bc", "intbc": "quantized_bc"}
_PAIR = re.compile(r"^(?:qa_)?(?P<baseline>.+?)_?vs_?(?P<analysis>.+)$", re.I)
# the guides' folders of one step each: (type, baseline, analysis); a convert sensitivity
# runs against qat.export.pt (knowledge.md §16 R3.5)
_STEP_FOLDERS = {"qa_pre_export": ("pre_export", "qat", "qat_export"),
                 "qa_export": ("export", "qat_export", "qat_bc"),
                 "qa_export_sens": ("export", "qat_export", "qat_bc"),
                 "qa_convert": ("convert", "qat_bc", "quantized_bc"),
                 "qa_convert_sens": ("convert", "qat_export", "quantized_bc")}
# a name that gives no stage pair may still hint at a step (read after the tables' content)
_NAME_HINTS = (("convert", re.compile(r"convert|quantized|intbc|qbc", re.I)),
               ("pre_export", re.compile(r"pre_?export|lut", re.I)),
               ("export", re.compile(r"export|hbir|qatbc|qat_bc", re.I)),
               ("fake_quant", re.compile(r"calib|float|fake|qua_", re.I)))
# a folder named like this holds qcdoctor probe output (fake_quant unless stated)
_PROBE_NAME = re.compile(r"probe", re.I)


def _problem(file: str, problem, partial: bool, source: str,
             locations: list[dict] | None = None) -> dict:
    """An artifact_problem fact located at ``locations``, by default the file itself
    (nowhere when it lies outside the case folder)."""
    return {**artifact_problem(file, problem, partial, source),
            "locations": at(file) if locations is None else locations}


def _is_qa_folder(folder: Path) -> bool:
    try:
        names = {p.name for p in folder.iterdir() if p.is_file()}
    except OSError:
        return False
    return bool(names & set(_MARKERS)) or any(SENSITIVITY_RE.match(n) for n in names)


def discover(case: Case, files: CaseFiles | None = None) -> list[Path]:
    """QA folders named in artifacts.quant_analysis, else found in the case folder.

    Discovery never descends into symlinked folders; one that leads out of the case is
    not even listed, and is refused (so reported) instead.
    """
    if case.folder is None:
        return []
    named = case.get("artifacts", {}).get("quant_analysis")
    if named:
        return [case.folder / n for n in named]
    files = files or CaseFiles(case.folder)
    found = []
    for root, dirs, _ in walk(case.folder, MAX_DEPTH):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        for d in dirs:
            try:
                files.folder_path(root / d)
            except ArtifactRefused:
                continue
            if _is_qa_folder(root / d):
                found.append(root / d)
    found.sort()
    if _is_qa_folder(case.folder):
        found.insert(0, case.folder)
    return found


def _rel(case: Case, path: Path) -> str:
    try:
        rel = path.relative_to(case.folder).as_posix()
    except ValueError:
        return path.as_posix()
    return rel or "."


def _comparison(case: Case, rel: str, compare, probe: dict | None) -> tuple[str, str, str, str]:
    """(type, baseline, analysis, known_from) of one folder."""
    run = run_for(case.get("analyses_run"), rel)
    if run is not None:
        kind = analysis_type(run.get("type"), run["analysis"])
        return kind, run["baseline"], run["analysis"], "analyses_run"
    if probe is not None:
        return probe["type"], probe["baseline"], probe["analysis"], "probe"
    named = stage_pair_of_name(rel)
    if named is not None:       # R5.8: a stage pair the name states, read as if declared
        return (*named, "folder name")
    kind = _type_from_content(compare) if compare is not None else ""
    if kind:
        return kind, *ANALYSIS_TYPE_STAGES[kind], "content"
    kind = _type_from_name(rel)
    if kind:
        return kind, *ANALYSIS_TYPE_STAGES[kind], "folder name"
    return "unknown", "", "", "unknown"


def stage_pair_of_name(rel: str) -> tuple[str, str, str] | None:
    """(type, baseline, analysis) a folder's name states (knowledge.md §18 R5.8): one of
    the guides' step folders, or ``<baseline>_vs_<analysis>`` in that order; None when the
    name states no pair. The type follows from the analysed stage, as for an analyses_run
    entry that declares no type."""
    name = Path(rel).name.lower()
    if name in _STEP_FOLDERS:
        return _STEP_FOLDERS[name]
    match = _PAIR.match(name)
    if match is None:
        return None
    baseline, analysis = (_STAGE_WORDS.get(re.sub(r"[_.\-]", "", match[side]))
                          for side in ("baseline", "analysis"))
    if baseline is None or analysis is None or baseline == analysis:
        return None
    return analysis_type(None, analysis), baseline, analysis


def _type_from_name(rel: str) -> str:
    """The analysis type a folder's name gives ("" when it gives none)."""
    name = Path(rel).name
    if _PROBE_NAME.search(name):
        return "fake_quant"
    named = stage_pair_of_name(rel)
    if named is not None:
        return named[0]
    return next((kind for kind, pattern in _NAME_HINTS if pattern.search(name)), "")


def _origin(case: Case, rel: str, probe: dict | None) -> str:
    """Which tool wrote the folder: ``probe`` (qcdoctor probe) or ``profiler``."""
    run = run_for(case.get("analyses_run"), rel)
    if run is not None and run.get("origin"):
        return run["origin"]
    if probe is not None or _PROBE_NAME.search(Path(rel).name):
        return "probe"
    return "profiler"


# how a model the probe read was quantized (probe_run.yaml's flow)
PROBE_FLOWS = ("torch_ao_fx", "torch_ao_eager", "other")


def _probe_manifest(path: Path) -> dict:
    """probe_run.yaml: what qcdoctor probe compared; refused when it is not its own."""
    data = load_probe_manifest(path)
    if not isinstance(data, dict) or data.get("origin") != "probe":
        raise ValueError(reason("not written by qcdoctor probe (no 'origin: probe')"))
    kind = data.get("type")
    if kind not in ANALYSIS_TYPE_STAGES:
        raise ValueError(reason("type {kind!r} is not one of {types}", kind=kind,
                                types=", ".join(ANALYSIS_TYPE_STAGES)))
    baseline, analysis = data.get("baseline"), data.get("analysis")
    if baseline not in STAGES or analysis not in STAGES:
        baseline, analysis = ANALYSIS_TYPE_STAGES[kind]
    listed = data.get("files") if isinstance(data.get("files"), list) else []
    flow = data.get("flow")
    return {"type": kind, "baseline": baseline, "analysis": analysis,
            # the analysis model's quantization flow: fix code is written in it
            "flow": flow if flow in PROBE_FLOWS else "other",
            # knowledge.md §16 R3.10: a sensitivity the probe ran counts as run
            "sensitivity": data.get("sensitivity") is True,
            "tables": [n for n in map(str, listed) if SENSITIVITY_RE.match(n)],
            # a probe over many samples: its bad-case search, checked when read
            # (collectors/sample_search.py); None for a one-input probe
            "samples": data.get("samples")}


def _missing_probe_tables(probe: dict | None, found: dict, prel: str) -> list[dict]:
    """The sensitivity tables probe_run.yaml lists that are not in the folder: the run
    happened, its tables were not kept."""
    missing = [n for n in (probe or {}).get("tables", []) if n not in found]
    if not missing:
        return []
    return [_problem(prel, reason("probe_run.yaml lists sensitivity tables that are not in "
                                  "the folder: {names}", names=", ".join(missing[:5])),
                     True, prel)]


def _type_from_content(compare) -> str:
    frame = compare.frame
    if "analy_op_type" not in frame or "base_op_type" not in frame:
        return ""
    analy = frame["analy_op_type"].dropna().astype(str).head(200)
    base = frame["base_op_type"].dropna().astype(str).head(200)
    if analy.empty or base.empty:
        return ""
    hbir_analy = analy.str.contains(r"\[", regex=True).mean() > 0.5
    hbir_base = base.str.contains(r"\[", regex=True).mean() > 0.5
    if hbir_analy and hbir_base:
        return "convert"
    float_base = base.str.contains(r"^\s*torch\.nn\.modules", regex=True).mean() > 0.3
    qat_analy = analy.str.contains(r"\.qat\.", regex=True).mean() > 0.3
    if float_base and qat_analy:
        return "fake_quant"
    return ""


def collect_quant_analysis(case: Case, trust_pickles: bool = False,
                           limits: Thresholds = DEFAULT, files: CaseFiles | None = None,
                           input_scales: list | None = None) -> list[dict]:
    """Facts of the QuantAnalysis outputs; every file is read through ``files``
    (refusals are recorded there, not returned). ``input_scales``, when given, receives
    (scale, source, locations) of every input QuantStub the outputs of a QAT-scaled model
    show: the QAT calibration scale the board input must use (knowledge.md §10)."""
    files = files or CaseFiles(case.folder)
    facts: list[dict] = []
    graph = _graph(case, facts, files)
    for folder in discover(case, files):
        rel = _rel(case, folder)
        try:
            files.folder_path(folder, case.source("artifacts.quant_analysis"))
        except ArtifactRefused:
            continue
        if not folder.is_dir():
            facts.append(_problem(rel, reason("folder not found"), False,
                                  case.source("artifacts"), case_key(case, "artifacts")))
            continue
        facts += _folder_facts(case, folder, rel, graph, trust_pickles, limits, files,
                               input_scales)
    _read_against_origins(facts)
    _mark_sibling_sensitivity(facts)
    shared: dict[str, tuple[int, str, list]] = {}
    facts += _model_check_facts(case, files, shared)
    facts += _source_map_facts(case, files, facts, shared)
    facts += shared_call_facts(facts, shared)
    return facts


def _source_map_facts(case: Case, files: CaseFiles, facts: list[dict],
                      shared: dict[str, tuple[int, str, list]]) -> list[dict]:
    """hbm_perf's forward.json (artifacts.hbm_perf, else where it lies in the case folder):
    where the located ops are defined, and modules under several compiled layers."""
    from qcdoctor.collectors.hbm_perf import FORWARD_JSON, load_forward_json, source_map_facts
    if case.folder is None:
        return []
    named = case.get("artifacts", {}).get("hbm_perf")
    paths = [case.folder / named] if named else find_files(case.folder, FORWARD_JSON)
    out: list[dict] = []
    for path in paths:
        rel = _rel(case, path)
        if not os.path.lexists(path):
            out.append(_problem(rel, reason("file not found"), False,
                                case.source("artifacts.hbm_perf"),
                                case_key(case, "artifacts.hbm_perf")))
            continue
        found = _read(out, rel, lambda checked: load_forward_json(
            files.read_bytes(checked, "source_map")), path, files=files, kind="source_map")
        if found is not None:
            out += source_map_facts(found, rel, facts, shared)
    return out


def _same_comparison(folder: dict) -> tuple[str, str] | None:
    """The comparison a folder belongs to: its type and analysed stage, or None when
    either is unknown. knowledge.md §6 rev 2 runs one comparison in two folders (the
    convert per-layer table in ``qa_convert``, its sensitivity against qat.export.pt in
    ``qa_convert_sens``): their baselines differ, their type and analysed model do not."""
    if folder["comparison"] == "unknown" or not folder["analysis_stage"]:
        return None
    return folder["comparison"], folder["analysis_stage"]


def _mark_sibling_sensitivity(facts: list[dict]) -> None:
    """knowledge.md §17 R4.7: a sensitivity run in another folder of the same comparison
    counts as this one's."""
    folders = [f for f in facts if f["type"] == "qa_folder"]
    for folder in folders:
        same = _same_comparison(folder)
        folder["sibling_sensitivity"] = same is not None and any(
            other is not folder and other["sensitivity_ran"] and _same_comparison(other) == same
            for other in folders)


# scopes whose readings drive origin findings, remedies and bc_editor targets (R4.5)
_DRIVING_SCOPES = ("located", "unplaced")


def place_folders(facts: list[dict], stage_facts: list[dict], case: Case) -> None:
    """knowledge.md §17 R4.5: which step each QuantAnalysis folder speaks for (its
    qa_folder ``scope``) and whether its readings drive origin findings, remedies and
    bc_editor targets (``drives``, copied onto every fact read from the folder)."""
    drop = _located_drop(stage_facts)
    recovered = any(f["type"] == "calib_recovered" for f in stage_facts)
    postprocess = case.get("postprocess_in_model") == "yes"
    drives = {}
    named = {run["out_dir"]: run for run in named_runs(facts, case)}
    for folder in (f for f in facts if f["type"] == "qa_folder"):
        run = run_for(case.get("analyses_run"), folder["analysis"]) or named.get(folder["analysis"])
        scope = _scope(folder, drop, recovered, run is not None and _made_in_one_run(case, run),
                       postprocess)
        folder.update(scope=scope, drives=scope in _DRIVING_SCOPES,
                      drop_from=drop[0] if drop else "", drop_to=drop[1] if drop else "")
        drives[folder["analysis"]] = folder["drives"]
    for fact in facts:
        if fact["type"] != "qa_folder" and "drives" in FACT_TYPES.get(fact["type"], {}):
            fact["drives"] = drives.get(fact.get("analysis"), True)
        if fact["type"] == "sensitivity_summary":
            # §8: whatever the folder speaks for, a raised tail says the run is unsound;
            # post-processing declared in the model is its likely cause
            fact["postprocess_declared"] = postprocess


def named_runs(facts: list[dict], case: Case) -> list[dict]:
    """knowledge.md §18 R5.8: the folders whose name states their stage pair and that no
    analyses_run entry lists, as the entries that would declare them (read the same way:
    the same run facts, summary and validity)."""
    return [{"type": f["comparison"], "baseline": f["baseline"], "analysis": f["analysis_stage"],
             "out_dir": f["analysis"], "sensitivity": False}
            for f in facts if f["type"] == "qa_folder" and f["known_from"] == "folder name"
            and stage_pair_of_name(f["analysis"]) is not None
            and run_for(case.get("analyses_run"), f["analysis"]) is None]


def _located_drop(stage_facts: list[dict]) -> tuple[str, str] | None:
    """(last normal, first abnormal stage): the drop the stage rules conclude from
    (knowledge.md §5); None when there is none, or when a later normal stage or a rise
    leaves the conclusion undetermined."""
    if any(f["type"] in ("non_monotonic", "stage_rise") for f in stage_facts):
        return None
    drop = next((f for f in stage_facts if f["type"] == "transition"), None)
    return (drop["from"], drop["to"]) if drop else None


def _scope(folder: dict, drop: tuple[str, str] | None, recovered: bool, invalid: bool,
           postprocess: bool) -> str:
    """The folder's scope: the first that holds of a step QAT recovered, another step
    than the located drop, an invalid run, post-processing inside the compared model, the
    located step; unplaced when no drop is located or its comparison is in doubt."""
    declared = _declared(folder)
    if folder.get("control") or (folder["baseline"] and
                                 folder["baseline"] == folder["analysis_stage"]):
        # R5.6: one stage against itself (declared, or two quantized versions of one model
        # the probe found equal without their quantization): what noise looks like
        return "control"
    if declared and recovered and folder["analysis_stage"] == "calib":
        return "recovered"          # float vs calib, a loss QAT recovered: never the cause
    if declared and drop is not None and \
            not _spans(folder["baseline"], folder["analysis_stage"], drop):
        return "other_step"
    if invalid:
        return "invalid_run"
    if postprocess:
        return "postprocess"
    return "located" if declared and drop is not None else "unplaced"


def _declared(folder: dict) -> bool:
    """R4.5 places a folder by the comparison it declares: its analyses_run entry, its
    probe_run.yaml or the stage pair its name gives. One judged from the tables alone is
    placed only where its name gives the same type: where they disagree, which step it
    compares is in doubt, and its readings are read as before."""
    if _same_comparison(folder) is None or not folder["baseline"]:
        return False
    return folder["known_from"] != "content" or \
        _type_from_name(folder["analysis"]) == folder["comparison"]


def _spans(baseline: str, analysis: str, drop: tuple[str, str]) -> bool:
    """The comparison covers part of the drop's step: the chain between its two models
    and the chain between the drop's ends share a step (with unknown stages between
    the drop's ends, any part of the gap may hold it)."""
    low, high = sorted((STAGES.index(baseline), STAGES.index(analysis)))
    return low < STAGES.index(drop[1]) and high > STAGES.index(drop[0])


def _made_in_one_run(case: Case, run: dict) -> bool:
    """knowledge.md §16 R3.5: an analyses_run entry comparing a torch model with a bc
    model in one run where differing input formats or a task list need two: invalid."""
    return not run.get("separate_runs", False) and needs_two_runs(
        run["baseline"], run["analysis"], case.get("input_format_differs", False),
        case.get("has_task_input", False))


def _read_against_origins(facts: list[dict]) -> None:
    """Add to every sensitivity summary how it reads against compare_per_layer's clear
    origins (cliffs) of the same model (knowledge.md §16 R3.10), and whether that
    comparison is clean: every compared layer in the clean band, so the sensitivity ranks
    noise and none of its readings (top op, flatness, tail) is used."""
    from qcdoctor.collectors.sensitivity import against_origins
    folders = {f["analysis"]: f for f in facts if f["type"] == "qa_folder"}
    cliffs: dict[str, list[str]] = {}
    clean: dict[str, list[str]] = {}
    for fact in facts:
        # clear origins: one source after a clean prefix, or two (R3.8), in order
        if fact["type"] == "layer_origin" and fact["pattern"] in ("cliff", "two_sources"):
            named = [fact["layer"], fact.get("second_layer", "")]
            cliffs.setdefault(fact["analysis"], []).extend(n for n in named if n)
        if fact["type"] == "layer_table" and fact["compared"] > 0 and not fact["abnormal"]:
            clean[fact["analysis"]] = [fact["analysis"]]
    for fact in facts:
        if fact["type"] == "sensitivity_summary":
            folder = folders.get(fact["analysis"])
            fact.update(against_origins(fact, _origins_for(folder, folders, cliffs)))
            # its own per-layer table clean, or (a sensitivity folder of its own) that of
            # a folder making the same comparison
            fact["comparison_clean"] = bool(_origins_for(folder, folders, clean))
            if fact["comparison_clean"]:
                fact["usable"] = False


def _origins_for(folder: dict | None, folders: dict[str, dict],
                 cliffs: dict[str, list[str]]) -> list[str]:
    """The cliffs of the folder's own compare table; for a folder holding sensitivity
    alone (knowledge.md §6 rev 2 runs the convert sensitivity in a folder of its own),
    those of the folders comparing the same analysis model by the same type."""
    if folder is None:
        return []
    if folder["has_compare"]:
        return cliffs.get(folder["analysis"], [])
    same = _same_comparison(folder)
    if same is None:
        return []
    return [layer for name, other in folders.items()
            if other["has_compare"] and _same_comparison(other) == same
            for layer in cliffs.get(name, [])]


def _read(facts: list[dict], rel: str, reader, path: Path, *args, files: CaseFiles, kind: str):
    """Run a reader on a file ``files`` lets through; a failure becomes an artifact_problem
    fact, never an exception (a refusal is recorded by ``files``)."""
    try:
        return reader(files.check(path, kind), *args)
    except ArtifactRefused:
        return None
    except TableRefused as exc:         # refused at a line (past a cap): the fact points there
        facts.append(_problem(rel, with_fix(_on_line(exc), exc.fix), False, rel,
                              at(rel, exc.line) if exc.line else None))
    except QcdoctorError as exc:
        facts.append(_problem(rel, with_fix(exc.problem, exc.fix), False, rel))
    except (ValueError, OSError, UnicodeDecodeError, IndexError, KeyError) as exc:
        facts.append(_problem(rel, of_exception(exc), False, rel))
    except Exception as exc:  # noqa: BLE001 - pandas raises many kinds on damaged input
        facts.append(_problem(rel, f"{type(exc).__name__}: {exc}", False, rel))
    return None


def _on_line(exc: TableRefused) -> str:
    """The error's problem after the line it names, in both languages (the fact names the
    file)."""
    if not exc.line:
        return exc.problem
    return Reason(str(reason("line {line}: {problem}", line=exc.line, problem=str(exc.problem))),
                  zh(reason("line {line}: {problem}", line=exc.line, problem=zh(exc.problem))))


# analysed stages whose input QuantStub carries the QAT scale (a calibration model's scale
# may still move in QAT; a float model has none)
_QAT_SCALED = ("qat", "qat_export", "qat_bc", "quantized_bc")


def _input_scales(folder: Path, rel: str, compare, crel: str, analysis_stage: str,
                  facts: list[dict], files: CaseFiles) -> list[tuple[float, str, list[dict]]]:
    """The input QuantStub scales of the analysed model: its rows in compare_per_layer
    (qscale), else in analysis_model/statistic.txt (the output row's scale)."""
    from qcdoctor.collectors.reading.compare_layers import stub_scales
    if analysis_stage not in _QAT_SCALED:
        return []
    if compare is not None:
        found = [(scale, f"{crel} line {line} ({name})", at(crel, line))
                 for scale, line, name in stub_scales(compare)]
        if found:
            return found
    stat = folder / "analysis_model" / "statistic.txt"
    if not stat.is_file():
        return []
    srel = f"{rel}/analysis_model/statistic.txt" if rel != "." else "analysis_model/statistic.txt"
    rows = _read(facts, srel, load_statistic, stat, files=files, kind="table") or []
    return [(r["scale"], f"{srel} line {r['line']} ({r['module'] or r['op']})",
             at(srel, r["line"])) for r in rows
            if _is_quant_stub(r["op"]) and r["attr"] == "output"
            and math.isfinite(r["scale"]) and r["scale"] > 0]


def _is_quant_stub(op_type: str) -> bool:
    return "QuantStub" in op_type and "DeQuantStub" not in op_type


def _folder_facts(case, folder, rel, graph, trust_pickles, limits, files,
                  input_scales: list | None = None) -> list[dict]:
    # numpy/pandas load only when a case has QuantAnalysis outputs
    from qcdoctor.collectors.reading.compare_layers import load_compare, read_layers, row_facts
    from qcdoctor.collectors.sensitivity import load_sensitivity, ranked, summarise
    from qcdoctor.collectors.series import layer_series, sensitivity_series

    facts: list[dict] = []
    # every entry but folders: a FIFO or symlink among them is refused when read, and listed
    found = {p.name: p for p in folder.iterdir() if not p.is_dir()}
    compare_path = next((found[n] for n in COMPARE_NAMES if n in found), None)
    compare = None
    if compare_path is not None:
        crel = f"{rel}/{compare_path.name}" if rel != "." else compare_path.name
        compare = _read(facts, crel, load_compare, compare_path, files=files, kind="table")
    probe = None
    if PROBE_MANIFEST in found:
        prel = f"{rel}/{PROBE_MANIFEST}" if rel != "." else PROBE_MANIFEST
        probe = _read(facts, prel, _probe_manifest, found[PROBE_MANIFEST], files=files,
                      kind="config")
    kind, baseline, analysis_stage, known = _comparison(case, rel, compare, probe)
    if FIX_TRIALS in found:             # the remedies qcdoctor probe --try-fixes measured
        from qcdoctor.collectors.fix_trials import load_fix_trials
        frel = f"{rel}/{FIX_TRIALS}" if rel != "." else FIX_TRIALS
        facts += _read(facts, frel, load_fix_trials, found[FIX_TRIALS], rel, frel,
                       files=files, kind="config") or []
    sens_paths = sorted(p for n, p in found.items() if SENSITIVITY_RE.match(n))
    # prefer .txt over .pt of the same table
    stems = {p.name.rsplit(".", 1)[0] for p in sens_paths if p.suffix == ".txt"}
    sens_paths = [p for p in sens_paths if p.suffix == ".txt" or p.name.rsplit(".", 1)[0] not in stems]
    facts += _missing_probe_tables(probe, found, prel if probe else "")
    folder_fact = {"type": "qa_folder", "analysis": rel, "comparison": kind,
                  "baseline": baseline, "analysis_stage": analysis_stage, "known_from": known,
                  "origin": _origin(case, rel, probe),
                  "flow": probe["flow"] if probe else "horizon",
                  "has_compare": compare is not None, "has_sensitivity": bool(sens_paths),
                  "sensitivity_ran": bool(sens_paths) or bool(probe and probe["sensitivity"]),
                  "has_advisor": any(n in found for n in ADVISOR_NAMES),
                  "has_badcase": "badcase.txt" in found or "all_badcase_info.pt" in found,
                  # set once every folder is read (_mark_sibling_sensitivity) and the
                  # stage table is (place_folders); the reading's origin below
                  # a control (R5.6): two quantized versions of one model the probe found
                  # equal without their quantization (collectors/model_match.py)
                  "control": False,
                  "sibling_sensitivity": False, "scope": "unplaced", "drives": True,
                  "drop_from": "", "drop_to": "", "origin_layer": "", "origin_pattern": "",
                  "source": rel}
    facts.append(folder_fact)
    if compare is not None:
        calls = _layer_calls(facts, rel, found, files)
        reading = read_layers(compare, limits, _folder_graph(facts, rel, found, files) or graph,
                              _own_errors(facts, rel, found, files), calls)
        rows = row_facts(compare, reading, rel, crel)
        origin = next((f for f in rows if f["type"] == "layer_origin"), None)
        if origin is not None:          # what the folder's reading names, for R4.5's findings
            folder_fact.update(origin_layer=origin["layer"], origin_pattern=origin["pattern"])
        facts += rows
        facts.append(layer_series(compare, reading, rel, crel))
        if compare.table.problems:
            facts.append(_problem(crel, joined(compare.table.problems), True, crel))
    top_weight = None
    for path in sens_paths:
        srel = f"{rel}/{path.name}" if rel != "." else path.name
        sens = _read(facts, srel, load_sensitivity, path, trust_pickles, files=files,
                     kind="pickle" if path.suffix == ".pt" else "table")
        if sens is None:
            continue
        summary = summarise(sens, rel, srel, limits, baseline)
        if sens.problems:
            facts.append(_problem(srel, joined(sens.problems[:5]), True, srel))
        if summary is None:
            facts.append(_problem(srel, reason("no usable rows"), True, srel))
            continue
        top_row = ranked(sens)[0][0]                 # the row summarise names first
        facts += [{**summary, "locations": at(srel, top_row.line)},
                  sensitivity_series(sens, summary, srel)]
        if summary["top_kind"] == "weight" and summary["usable"]:
            top_weight = summary["top_op"]
    if probe is not None:                   # R5.3: do the models differ beyond quantization
        facts += model_match_facts(facts, found[PROBE_MANIFEST], rel, prel)
    if probe is not None and probe["samples"] is not None:
        facts += _sample_search(facts, probe["samples"], found, rel, prel, files)
    for name in ADVISOR_NAMES:
        if name in found:
            arel = f"{rel}/{name}" if rel != "." else name
            loaded = _read(facts, arel, load_advisor, found[name], files=files, kind="table")
            if loaded:
                rows, problems = loaded
                if problems:
                    facts.append(_problem(arel, joined(problems[:5]), True, arel))
                facts += [{"type": "advisor_message", "analysis": rel, "layer": r["layer"],
                           "kind": r["kind"], "op_type": r["op_type"][:120],
                           "message": (r["info"] or r["advice"])[:200],
                           "source": f"{arel} line {r['line']}",
                           "locations": at(arel, r["line"])} for r in rows]
            break
    if "badcase.txt" in found:
        brel = f"{rel}/badcase.txt" if rel != "." else "badcase.txt"
        indices = _read(facts, brel, worst_indices_from_txt, found["badcase.txt"], files=files,
                        kind="table")
        if indices:
            facts.append({**spread_fact(indices, rel, brel), "locations": at(brel)})
    elif "all_badcase_info.pt" in found:
        brel = f"{rel}/all_badcase_info.pt" if rel != "." else "all_badcase_info.pt"
        indices = _read(facts, brel, worst_indices_from_pt, found["all_badcase_info.pt"],
                        trust_pickles, files=files, kind="pickle")
        if indices:
            facts.append({**spread_fact(indices, rel, brel), "locations": at(brel)})
    if top_weight:
        for side in ("analysis_model", "baseline_model"):
            stat = folder / side / "statistic.txt"
            if stat.is_file():
                srel = f"{rel}/{side}/statistic.txt"
                rows = _read(facts, srel, load_statistic, stat, files=files, kind="table")
                fact = weight_fact(rows or [], top_weight, rel, srel)
                if fact and math.isfinite(fact["min"]) and math.isfinite(fact["max"]):
                    row = next(r for r in rows if r["module"] == top_weight
                               and r["attr"] == "weight")        # the row weight_fact took
                    facts.append({**fact, "locations": at(srel, row["line"])})
                break
    if input_scales is not None:
        input_scales += _input_scales(folder, rel, compare, crel if compare is not None else "",
                                      analysis_stage, facts, files)
    return facts


def _sample_search(facts: list[dict], samples, found: dict, rel: str, prel: str,
                   files: CaseFiles) -> list[dict]:
    """The probe's bad-case search (knowledge.md §3, §8): probe_run.yaml's ``samples``
    and sample_errors.csv, as one sample_search fact and its plot series. A bad
    ``samples`` leaves the search out; a bad sample_errors.csv leaves the search to the
    manifest's figures; files of two different searches leave it out. Each is one problem
    naming the file and the key or line."""
    from qcdoctor.collectors.sample_errors import load_sample_errors
    from qcdoctor.collectors.sample_search import read_samples, search_facts
    try:
        checked = read_samples(samples)
    except ValueError as exc:
        return [_problem(prel, joined([of_exception(exc),
                                       reason("the bad-case search is left out")]), True, prel)]
    erel = f"{rel}/{SAMPLE_ERRORS}" if rel != "." else SAMPLE_ERRORS
    errors = None
    if SAMPLE_ERRORS in found:
        errors = _read(facts, erel, load_sample_errors, found[SAMPLE_ERRORS], checked["output"],
                       checked["chosen"], files=files, kind="table")
    try:
        return search_facts(checked, errors, rel, prel, erel)
    except ValueError as exc:
        return [_problem(erel, joined([of_exception(exc),
                                       reason("the bad-case search is left out")]), False, erel)]


def _graph(case: Case, facts: list[dict], files: CaseFiles) -> Graph | None:
    if case.folder is None:
        return None
    named = case.get("artifacts", {}).get("fx_graph")
    path = case.folder / named if named else next(iter(find_files(case.folder, "fx_graph*.txt")), None)
    if path is None:
        return None
    rel = _rel(case, path)
    if not os.path.lexists(path):
        facts.append(_problem(rel, reason("file not found"), False,
                              case.source("artifacts.fx_graph"),
                              case_key(case, "artifacts.fx_graph")))
        return None
    loaded = _read(facts, rel, load_graph, path, files=files, kind="graph")
    if loaded is None:
        return None
    graph, hints = loaded
    _short_rows(facts, rel, graph)
    facts += [{"type": "deploy_branch_hint", "node": h["node"], "target": h["target"],
               "source": f"{rel} line {h['line']}", "locations": at(rel, h["line"])}
              for h in hints[:20]]
    facts.append({"type": "graph_loaded", "nodes": len(graph.nodes), "source": rel,
                  "locations": at(rel)})
    return graph


def _folder_graph(facts: list[dict], rel: str, found: dict, files: CaseFiles) -> Graph | None:
    """The folder's own fx_graph.txt (qcdoctor probe writes the analysis model's beside its
    tables, each node with the row it reports): read before the case's."""
    if "fx_graph.txt" not in found:
        return None
    grel = f"{rel}/fx_graph.txt" if rel != "." else "fx_graph.txt"
    loaded = _read(facts, grel, load_graph, found["fx_graph.txt"], files=files, kind="graph")
    if loaded:
        _short_rows(facts, grel, loaded[0])
    return loaded[0] if loaded else None


def _short_rows(facts: list[dict], rel: str, graph: Graph) -> None:
    """An fx_graph.txt row without its args cell is left out, and said (the rest of the
    graph is read)."""
    if graph.short_lines:
        lines = ", ".join(map(str, graph.short_lines[:5]))
        facts.append(_problem(rel, reason("{count} row(s) without their args cell were not "
                                          "read: line(s) {lines}",
                                          count=len(graph.short_lines), lines=lines), True,
                              f"{rel} line {graph.short_lines[0]}",
                              at(rel, graph.short_lines[0])))


def _layer_calls(facts: list[dict], rel: str, found: dict, files: CaseFiles) -> dict | None:
    """layer_calls.csv's calls by row name (qcdoctor probe writes it beside its tables):
    the graph the reading prefers to fx_graph.txt."""
    from qcdoctor.collectors.reading.layer_calls import LAYER_CALLS_FILE, load_layer_calls
    return _companion(facts, rel, found, files, LAYER_CALLS_FILE, load_layer_calls)


def _own_errors(facts: list[dict], rel: str, found: dict, files: CaseFiles) -> dict | None:
    """layer_own_error.csv's rows by mod_name, where the probe measured them."""
    from qcdoctor.collectors.reading.own_error import OWN_ERROR_FILE, load_own_error
    return _companion(facts, rel, found, files, OWN_ERROR_FILE, load_own_error)


def _companion(facts: list[dict], rel: str, found: dict, files: CaseFiles, name: str,
               loader) -> dict | None:
    """A file the probe writes beside its tables, read by ``loader`` into (rows by name,
    problems): its problems one partial artifact_problem, None where it is absent, empty
    or unreadable."""
    if name not in found:
        return None
    frel = f"{rel}/{name}" if rel != "." else name
    loaded = _read(facts, frel, loader, found[name], files=files, kind="graph")
    if loaded is None:
        return None
    rows, problems = loaded
    if problems:
        facts.append(_problem(frel, joined(problems[:5]), True, frel))
    return rows or None


def _model_check_facts(case: Case, files: CaseFiles,
                       shared: dict[str, tuple[int, str, list]]) -> list[dict]:
    """The findings of the model_check_result files; ``shared`` gets every module called
    more than once: (times, source, locations)."""
    if case.folder is None:
        return []
    named = case.get("artifacts", {}).get("model_check_result")
    paths = [case.folder / named] if named else find_files(case.folder, "model_check_result*.txt")
    facts: list[dict] = []
    for path in paths:
        rel = _rel(case, path)
        if not os.path.lexists(path):
            facts.append(_problem(rel, reason("file not found"), False,
                                  case.source("artifacts"), case_key(case, "artifacts")))
            continue
        read = _read(facts, rel, read_model_check, path, files=files, kind="table")
        if read is None:
            continue
        # what prepare says it ran with: versions and march (folded in by case_facts)
        facts += prepare_facts(read, rel)
        by_kind: dict[tuple[str, str], list[dict]] = {}
        for item in read.findings:
            if item["kind"] == "shared":
                shared.setdefault(item["module"], (item["times"], f"{rel} line {item['line']}",
                                                   at(rel, item["line"])))
            # the "please check" rows: one fact a message, its modules together
            message = item["detail"] if item["kind"] == "please_check" else ""
            by_kind.setdefault((item["kind"], message), []).append(item)
        for (kind, _), items in sorted(by_kind.items()):
            facts.append({"type": "model_check", "kind": kind, "count": len(items),
                          "modules": ",".join(i["module"] for i in items[:8]),
                          "detail": items[0]["detail"][:160],
                          "source": f"{rel} line {items[0]['line']}",
                          "locations": at(rel, items[0]["line"])})
    return facts
