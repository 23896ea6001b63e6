"""Every row of knowledge.md §5, §7 and §10, and every decision of §17 from R4.5 on, has the
rules that decide it, and every source the row can come from (case.yaml, the compile
script, the hb_compile YAML, dumps, profiler files) has a case that fires them and one
that keeps them quiet.

The map is data (tests/coverage/knowledge_rows.yaml); each example is built as a case
folder and triaged in full, so a source the collectors stop reading fails here.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path

import numpy as np
import pytest
import yaml

from qcdoctor.collectors.case_file import load_case
from qcdoctor.collectors.qa_writers import psql
from qcdoctor.engine.diagnosis.triage import triage_case
from qcdoctor.engine.matching.rulebook import load_rules
from qcdoctor.vocabulary import ANALYSIS_TYPE_STAGES
from tests.diagnosis.one_voice import problems
from tests.paths import SHARED, TESTS
from tests.qa import scenarios
from tests.qa.writers import layer, write_compare, write_sensitivity

MAP_FILE = TESTS / "coverage" / "knowledge_rows.yaml"
MAP = yaml.safe_load(MAP_FILE.read_text(encoding="utf-8"))
ROWS = {row["id"]: row for row in MAP["rows"]}
# beside the checkout in the shared workspace; a clean clone has none
KNOWLEDGE = SHARED / "docs" / "knowledge.md"

SOURCES = ("case_yaml", "compile_script", "hb_compile_yaml", "dumps", "profiler")
# the example key holding each source's own material (case.yaml needs none)
MATERIAL = {"compile_script": "script", "hb_compile_yaml": "config", "dumps": "dumps",
            "profiler": "profiler"}
SCRIPT_PATH, CONFIG_PATH = "deploy/compile_model.py", "config.yaml"
EXPECT_KEYS = {"stage", "suspect", "determined", "checklist", "missing", "no_missing",
               "consistency", "actions", "no_actions", "evaluate", "facts", "costs", "order"}
SECTIONS = ("§5", "§7", "§10", "§17", "§18")
# knowledge.md §17's decisions the map covers: revision 4's from R4.5 on (R4.1-R4.4, the
# layer reading, are proven on layer tables and real networks: tests/collectors,
# tests/probe)
MAPPED_DECISIONS = ("R4.5", "R4.6", "R4.7", "R4.8", "R4.9", "R4.10")
EXAMPLE_KEYS = {"base", "case", "script", "config", "dumps", "profiler", "expect"}


def _examples():
    for row_id, row in ROWS.items():
        for source, spec in row["sources"].items():
            for kind in ("fires", "quiet", "contrast"):
                if kind in spec:
                    yield pytest.param(row_id, source, kind, id=f"{row_id}-{source}-{kind}")


# --- building a case folder from an example ----------------------------------------------

def merged(base, change):
    """``change`` over ``base``: mappings merge, None deletes a key, anything else replaces."""
    if not isinstance(base, dict) or not isinstance(change, dict):
        return copy.deepcopy(change)
    out = copy.deepcopy(base)
    for key, value in change.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merged(out.get(key), value)
    return out


def script_text(name: str) -> str:
    spec = MAP["bases"]["scripts"][name]
    if isinstance(spec, str):
        return spec
    text = script_text(spec["from"])
    for old, new in spec["replace"]:
        assert old in text, f"script {name}: {old!r} is not in {spec['from']}"
        text = text.replace(old, new)
    return text


# dump contents: the same, equal to 4 decimals (not bit-identical), clearly different
# ("far", not "off": YAML reads off as false)
_REF = np.linspace(-2.0, 2.0, 512, dtype=np.float32)
DUMPS = {"ref": _REF, "near": _REF + np.float32(1e-6), "far": _REF * np.float32(0.5) + np.float32(0.1)}


def write_dumps(folder: Path, spec: dict) -> dict:
    named = {}
    for stage, content in spec.items():
        path = folder / "dumps" / stage / "model_infer_output_0.bin"
        path.parent.mkdir(parents=True, exist_ok=True)
        DUMPS[content].tofile(path)
        named[stage] = f"dumps/{stage}"
    return named


QUANT_STUB = ("horizon_plugin_pytorch.quantization.stubs.QuantStub",
              "horizon_plugin_pytorch.nn.qat.stubs.QuantStub")


def write_profiler(folder: Path, spec: dict) -> dict:
    """A QuantAnalysis folder whose input QuantStubs carry ``stub_scales``, its layers a
    reading of tests/qa/scenarios (``rows``); the analyses_run entries that name it and
    its ``sensitivity_folder``, if any."""
    kind = spec["analysis"]
    out = folder / spec.get("folder", f"qa_{kind}")
    scales = spec.get("stub_scales", [])
    if spec.get("table", "compare") == "compare":
        rows = [layer(f"quant{i}", 0.99999, op=QUANT_STUB[0], analy_op=QUANT_STUB[1],
                      qscale=s, atol=s / 2) for i, s in enumerate(scales)]
        # the layers after the stubs: clean, or a reading of tests/qa/scenarios
        rows += getattr(scenarios, f"{spec['rows']}_rows")() if "rows" in spec else \
            [layer(f"backbone.conv{i}", 0.9999 - i * 1e-4) for i in range(4)]
        write_compare(out, rows)
    else:
        stat = out / "analysis_model"
        stat.mkdir(parents=True)
        header = ["Index", "Op Name", "Mod Name", "Attr", "Dtype", "Scale", "Min", "Max",
                  "Mean", "Var", "Shape"]
        rows = []
        for i, s in enumerate(scales):
            rows += [[str(i), QUANT_STUB[1], f"quant{i}", "input", "torch.float32", "",
                      "-1.0", "1.0", "0.0", "0.3", "torch.Size([1, 3, 8, 8])"],
                     [str(i), QUANT_STUB[1], f"quant{i}", "output", "qint8", f"{s:.7f}",
                      "-1.0", "1.0", "0.0", "0.3", "torch.Size([1, 3, 8, 8])"]]
        (stat / "statistic.txt").write_text(psql(header, rows, index=False), encoding="utf-8")
    baseline, analysis = ANALYSIS_TYPE_STAGES[kind]
    # ``run``: the analyses_run entry's other keys (sensitivity, separate_runs, stages)
    runs = [{"type": kind, "baseline": baseline, "analysis": analysis, "out_dir": out.name,
             **spec.get("run", {})}]
    if "sensitivity_folder" in spec:
        # the comparison's sensitivity run in a folder of its own (qa_convert_sens)
        sens = folder / spec["sensitivity_folder"]
        write_sensitivity(sens, scenarios.sens_rows([("head.bbox.conv", 0.3), ("pre.1", 0.02),
                                                     ("pre.2", 0.01), ("pre.3", 0.0)]))
        runs.append({**runs[0], "out_dir": sens.name, "sensitivity": True})
    return runs


def build_case(folder: Path, example: dict) -> Path:
    folder.mkdir(parents=True)
    data = merged(MAP["bases"]["cases"][example.get("base", "minimal")], example.get("case", {}))
    deploy = data.setdefault("deploy", {})
    if "script" in example:
        (folder / SCRIPT_PATH).parent.mkdir(parents=True)
        (folder / SCRIPT_PATH).write_text(script_text(example["script"]), encoding="utf-8")
        deploy["script"] = SCRIPT_PATH
    if "config" in example:
        (folder / CONFIG_PATH).write_text(yaml.safe_dump(example["config"]), encoding="utf-8")
        deploy["config"] = CONFIG_PATH
    if not deploy:
        del data["deploy"]
    if "dumps" in example:
        data.setdefault("artifacts", {})["dumps"] = write_dumps(folder, example["dumps"])
    if "profiler" in example:
        for run in write_profiler(folder, example["profiler"]):
            data.setdefault("analyses_run", []).append(run)
            data.setdefault("artifacts", {}).setdefault("quant_analysis", []).append(
                run["out_dir"])
    text = yaml.safe_dump({"schema": "qcdoctor/case-v1", **data}, allow_unicode=True)
    (folder / "case.yaml").write_text(text, encoding="utf-8")
    return folder


def triage(folder: Path) -> dict:
    return triage_case(load_case(folder), lang="en", environ={}, installed={}, cwd=folder)


def fired(report: dict) -> set[str]:
    """Every rule that matched, whether or not its output won (the trace keeps them all)."""
    return {entry["rule"] for entry in report["trace"]}


def source_rules(row: dict, source: str) -> list[str]:
    return row["sources"][source].get("rules", row["rules"])


# --- the map is complete and consistent --------------------------------------------------

def test_every_entry_names_existing_rules_and_both_examples_per_source():
    known = {rule.id for rule in load_rules()}
    problems = []
    ids = [row["id"] for row in MAP["rows"]] + [gap["id"] for gap in MAP.get("known_gaps", [])]
    problems += [f"{i}: id used twice" for i in {i for i in ids if ids.count(i) > 1}]
    for row in MAP["rows"]:
        where = row.get("id", "?")
        if row.get("section") not in SECTIONS:
            problems.append(f"{where}: section {row.get('section')!r}")
        if not row.get("quote"):
            problems.append(f"{where}: no quote of the row")
        if row.get("section") == "§17" and row.get("decision") not in MAPPED_DECISIONS:
            problems.append(f"{where}: decision {row.get('decision')!r} is not one of "
                            f"{', '.join(MAPPED_DECISIONS)}")
        if not row.get("rules"):
            problems.append(f"{where}: no rule decides it")
        problems += [f"{where}: rule {r} does not exist" for r in row.get("rules", [])
                     if r not in known]
        if not row.get("sources"):
            problems.append(f"{where}: no source")
        covered = set()
        for source, spec in (row.get("sources") or {}).items():
            if source not in SOURCES:
                problems.append(f"{where}: unknown source {source}")
                continue
            narrowed = spec.get("rules", row.get("rules", []))
            if not narrowed or not set(narrowed) <= set(row.get("rules", [])):
                problems.append(f"{where}/{source}: rules {narrowed} are not the entry's")
            covered |= set(narrowed)
            # a decision about what an action is (its cost, its place) rather than whether a
            # rule fires has a contrast: the same rules fire, and the expectation differs
            for kind in ("fires", "contrast" if "contrast" in spec else "quiet"):
                example = spec.get(kind)
                if not isinstance(example, dict):
                    problems.append(f"{where}/{source}: no {kind} example")
                    continue
                problems += _example_problems(f"{where}/{source}/{kind}", source, example)
        if covered != set(row.get("rules", [])):
            problems.append(f"{where}: rules {sorted(set(row['rules']) - covered)} have no source")
    assert not problems, "\n".join(problems)


def _example_problems(where: str, source: str, example: dict) -> list[str]:
    problems = [f"{where}: unknown key {k}" for k in set(example) - EXAMPLE_KEYS]
    problems += [f"{where}: unknown expectation {k}"
                 for k in set(example.get("expect", {})) - EXPECT_KEYS]
    if example.get("base", "minimal") not in MAP["bases"]["cases"]:
        problems.append(f"{where}: unknown base {example['base']}")
    if "script" in example and example["script"] not in MAP["bases"]["scripts"]:
        problems.append(f"{where}: unknown script {example['script']}")
    # a source's example shows that source; a case.yaml example reads no other file
    if source in MATERIAL and MATERIAL[source] not in example:
        problems.append(f"{where}: no {MATERIAL[source]} for this source")
    if source == "case_yaml" and set(example) & set(MATERIAL.values()):
        problems.append(f"{where}: a case.yaml example with files of another source")
    return problems


def test_known_gaps_are_stated_not_covered():
    for gap in MAP.get("known_gaps", []):
        assert gap["quote"] and gap["why"] and gap["section"] in SECTIONS
        assert "rules" not in gap and "sources" not in gap, gap["id"]


# rows once listed as known gaps, and the source that now reveals each: they stay mapped
CLOSED_GAPS = {"s5.float_export_state_from_script": "compile_script",
               "s10.stride_alignment": "case_yaml"}


def test_closed_gaps_stay_mapped():
    gaps = {gap["id"] for gap in MAP.get("known_gaps") or []}
    for row_id, source in CLOSED_GAPS.items():
        assert row_id in ROWS and row_id not in gaps, row_id
        assert {"fires", "quiet"} <= set(ROWS[row_id]["sources"].get(source, {})), row_id


def test_every_script_variant_applies():
    for name in MAP["bases"]["scripts"]:
        text = script_text(name)
        compile(text, name, "exec")


# --- knowledge.md itself: every table row and further case has an entry ----------------

def _section(text: str, number: int) -> str:
    match = re.search(rf"^## {number}\. .*?(?=^## \d+\. |\Z)", text, re.M | re.S)
    assert match, f"no section {number} in knowledge.md"
    return match.group(0)


def _table_keys(section: str, header_start: str) -> list[str]:
    """First cells of the table whose header row starts with ``header_start``."""
    lines = section.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header_start))
    keys = []
    for line in lines[start + 2:]:            # after the header and its separator
        if not line.startswith("|"):
            break
        keys.append(line.split("|")[1].strip().replace("`", ""))
    return keys


@pytest.fixture(scope="module")
def knowledge() -> str:
    if not KNOWLEDGE.is_file():
        pytest.skip("knowledge.md is not beside this checkout")
    return KNOWLEDGE.read_text(encoding="utf-8")


def test_every_transition_row_of_section_5_is_mapped(knowledge):
    rows = _table_keys(_section(knowledge, 5), "| L → A")
    assert len(rows) >= 10
    mapped = {r["table_row"] for r in MAP["rows"] if r["section"] == "§5" and "table_row" in r}
    assert not set(rows) - mapped, f"§5 rows without an entry: {sorted(set(rows) - mapped)}"
    assert not mapped - set(rows), f"entries naming no §5 row: {sorted(mapped - set(rows))}"


def test_every_further_case_of_section_5_is_mapped(knowledge):
    further = _section(knowledge, 5).split("Further cases:", 1)[1]
    bullets = re.findall(r"^- \*\*(.+?)\*\*", further, re.M)
    assert len(bullets) >= 8
    mapped = {r["bullet"] for r in MAP["rows"] if "bullet" in r}
    assert not set(bullets) - mapped, f"further cases without an entry: {sorted(set(bullets) - mapped)}"
    assert not mapped - set(bullets), f"entries naming no further case: {sorted(mapped - set(bullets))}"


def test_every_item_of_section_10_is_mapped(knowledge):
    items = _table_keys(_section(knowledge, 10), "| id | item")
    assert len(items) == 5
    mapped = {r["table_row"] for r in MAP["rows"] if r["section"] == "§10" and "table_row" in r}
    assert set(items) == mapped, f"§10 items vs entries: {sorted(set(items) ^ mapped)}"


def test_every_mapped_decision_of_section_17_is_mapped(knowledge):
    decisions = re.findall(r"^\*\*(R4\.\d+) ", _section(knowledge, 17), re.M)
    assert set(MAPPED_DECISIONS) <= set(decisions), decisions
    mapped = {r["decision"] for r in MAP["rows"] if r["section"] == "§17"}
    assert mapped == set(MAPPED_DECISIONS), sorted(set(MAPPED_DECISIONS) ^ mapped)


def test_every_decision_of_section_18_is_mapped(knowledge):
    """Every R5.n: an entry with examples, or the tests that decide it (each one there)."""
    decisions = re.findall(r"^\*\*(R5\.\d+) ", _section(knowledge, 18), re.M)
    assert len(decisions) >= 11, decisions
    by_examples = {r["decision"] for r in MAP["rows"] if r["section"] == "§18"}
    by_tests = MAP.get("revision5_tests", {})
    assert set(decisions) == by_examples | set(by_tests), \
        sorted(set(decisions) ^ (by_examples | set(by_tests)))
    for decision, tests in by_tests.items():
        for test in tests:
            path, _, name = test.partition("::")
            source = (TESTS.parent / path).read_text(encoding="utf-8")
            assert not name or f"def {name}(" in source, (decision, test)


# --- each example, triaged in full --------------------------------------------------------

@pytest.mark.parametrize("row_id,source,kind", list(_examples()))
def test_example(tmp_path, row_id, source, kind):
    row = ROWS[row_id]
    example = row["sources"][source][kind]
    folder = build_case(tmp_path / "case", example)
    report = triage(folder)
    rules, hits = source_rules(row, source), fired(report)
    if kind in ("fires", "contrast"):
        assert set(rules) <= hits, f"{sorted(set(rules) - hits)} did not fire"
    else:
        assert not set(rules) & hits, f"{sorted(set(rules) & hits)} fired"
    _check_expectations(report, example.get("expect", {}))
    case = yaml.safe_load((folder / "case.yaml").read_text(encoding="utf-8"))
    assert not problems(report, case), problems(report, case)     # R3.14: one voice


def _check_expectations(report: dict, expect: dict) -> None:
    conclusion = report["conclusion"]
    for key in ("stage", "suspect", "determined"):
        if key in expect:
            assert conclusion[key] == expect[key], (key, conclusion)
    statuses = {c["id"]: c["status"] for c in report["checklist"]}
    for item, status in expect.get("checklist", {}).items():
        assert statuses.get(item) == status, (item, statuses)
    missing = {m["id"] for m in report["missing"]}
    assert set(expect.get("missing", [])) <= missing, missing
    assert not set(expect.get("no_missing", [])) & missing, missing
    if "consistency" in expect:
        got = report["consistency"] or {}
        assert {k: got.get(k) for k in expect["consistency"]} == expect["consistency"], got
    actions = [a["id"] for a in report["next_actions"]]
    assert set(expect.get("actions", [])) <= set(actions), actions
    assert not set(expect.get("no_actions", [])) & set(actions), actions
    costs = {a["id"]: a["cost"] for a in report["next_actions"]}
    for action, cost in expect.get("costs", {}).items():
        assert costs.get(action) == cost, (action, costs)
    # ``order``: these actions listed, each before the next
    order = expect.get("order", [])
    assert set(order) <= set(actions), (order, actions)
    assert [a for a in actions if a in order] == order, actions
    evaluated = {a.get("stage_to_evaluate") for a in report["next_actions"]}
    assert set(expect.get("evaluate", [])) <= evaluated, evaluated
    for wanted in expect.get("facts", []):
        assert any(all(f.get(k) == v for k, v in wanted.items()) for f in report["facts"]), wanted
