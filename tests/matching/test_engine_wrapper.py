"""The durable_rules wrapper: its guards, determinism, memory, and agreement with the oracle."""

from __future__ import annotations

import json
import random
import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from qcdoctor.collectors.case_facts import collect_facts
from qcdoctor.engine.diagnosis.diagnose import run_rules
from qcdoctor.engine.matching import jsonfmt
from qcdoctor.engine.matching.patterns import oracle_bindings
from qcdoctor.engine.matching.rulebook import load_rules
from qcdoctor.engine.matching.runner import EngineFailure, RuleRunner, canonical
from qcdoctor.engine.matching.worker_memory import resident_mb
from qcdoctor.fact_types import FACT_TYPES, normalise
from tests.conftest import FLAT_RUNNER, case_from, triage_dict

CONVERT_CASE = {"evidence": ["dataset_eval"], "badcase": "available",
                "platform": {"chip": "J6E"}, "versions": {"hbdk4-compiler": "4.4.2"},
                "retrain": "no",
                "stages": {"qat": {"metric": "mAP", "value": 0.452},
                           "qat_bc": {"metric": "mAP", "value": 0.452},
                           "quantized_bc": {"metric": "mAP", "value": 0.391}},
                "tolerance": {"abs": 0.00001}}


@pytest.mark.parametrize("value,text", [(1e-05, "0.00001"), (0.1, "0.1"), (3.0, "3.0"),
                                        (1e22, "10000000000000000000000.0"),
                                        (-2.5e-7, "-0.00000025")])
def test_floats_are_written_without_exponent(value, text):
    assert jsonfmt.dumps({"v": value}) == '{"v": ' + text + "}"
    assert json.loads(jsonfmt.dumps({"v": value}))["v"] == value


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_nan_and_inf_never_reach_the_engine(bad):
    with pytest.raises(ValueError):
        jsonfmt.dumps({"v": bad})
    with pytest.raises(ValueError, match="finite"):
        normalise({"type": "stage", "stage": "qat", "value": bad})


def test_tiny_tolerance_float_survives_the_engine():
    """1e-05 in a fact crashed durable_rules' parser; the wrapper writes 0.00001."""
    report = triage_dict(CONVERT_CASE)
    assert report["conclusion"]["stage"] == "convert"


def test_facts_are_type_checked():
    with pytest.raises(ValueError, match="must be bool"):
        normalise({"type": "case", "input_format_differs": 1})
    with pytest.raises(ValueError, match="must be int"):
        normalise({"type": "transition", "gap": True})
    with pytest.raises(ValueError, match="no field"):
        normalise({"type": "stage", "stage": "qat", "colour": "red"})
    with pytest.raises(ValueError, match="unknown fact type"):
        normalise({"type": "nonsense"})


def test_duplicate_facts_change_nothing():
    facts = collect_facts(case_from(CONVERT_CASE))
    once = run_rules(facts)
    twice = run_rules(facts + facts)
    assert [(h.rule.id, canonical(h.facts)) for h in once] == \
           [(h.rule.id, canonical(h.facts)) for h in twice]


def test_shuffled_fact_order_gives_identical_reports():
    base = triage_dict(CONVERT_CASE)
    facts = collect_facts(case_from(CONVERT_CASE))
    rng = random.Random(7)
    for _ in range(10):
        shuffled = facts[:]
        rng.shuffle(shuffled)
        hits = run_rules(shuffled)
        assert [t["rule"] for t in base["trace"]] == [h.rule.id for h in hits]


def test_no_background_threads_are_started():
    before = threading.active_count()
    for _ in range(5):
        triage_dict(CONVERT_CASE)
    assert threading.active_count() == before


def test_exceptions_inside_actions_are_not_swallowed(monkeypatch):
    from qcdoctor.engine.matching import durable_host
    from qcdoctor.engine.matching.engine_process import EngineProcess
    rule = next(r for r in load_rules() if r.id == "ST050")

    def broken(c):
        raise RuntimeError("action failed")
    # the worker is forked after the patch, so its actions fail
    monkeypatch.setattr(durable_host, "bindings", broken)
    engine = EngineProcess()
    try:
        runner = RuleRunner([rule], engine=engine)
        with pytest.raises(EngineFailure, match="ST050: RuntimeError"):
            runner.run([{"type": "transition", "from": "qat_bc", "to": "quantized_bc", "gap": 0}])
        assert engine.worker_pid() is None, "a worker that reported an error is not reused"
    finally:
        engine.close()


def test_thousand_cases_in_one_process_keep_memory_flat():
    variants = []
    for i in range(1000):
        case = json.loads(json.dumps(CONVERT_CASE))
        case["stages"]["quantized_bc"]["value"] = 0.3 + (i % 97) / 1000
        case["retrain"] = ("yes", "no", "unknown")[i % 3]
        variants.append(case)
    for case in variants[:100]:              # warm up caches and allocator
        triage_dict(case)
    start = resident_mb()
    for case in variants:
        triage_dict(case)
    assert resident_mb() - start < 20


# --- oracle agreement on random fact sets -------------------------------------------

def _field_values(spec):
    if spec.kind == "bool":
        return st.booleans()
    if spec.kind == "int":
        return st.integers(min_value=-1, max_value=4)
    if spec.kind == "float":
        return st.sampled_from([0.0, 0.5, 1.0, 0.391, 1e-05])
    if spec.choices:
        return st.sampled_from(spec.choices)
    return st.sampled_from(["", "mAP", "qat_bc", "x"])


def _fact_strategy():
    return st.sampled_from(sorted(FACT_TYPES)).flatmap(lambda t: st.fixed_dictionaries(
        {"type": st.just(t), **{name: _field_values(spec) for name, spec in FACT_TYPES[t].items()}}))


def test_rulesets_can_be_added_after_the_engine_has_run():
    """Compiling never happens in an engine that has matched facts: a new ruleset takes a
    new worker, and both old and new runners answer correctly."""
    first = triage_dict(CONVERT_CASE)
    late = RuleRunner([r for r in load_rules() if r.id == "ST050"])
    hits = late.run([{"type": "transition", "from": "qat_bc", "to": "quantized_bc", "gap": 0}])
    assert [h.rule.id for h in hits] == ["ST050"]
    assert triage_dict(CONVERT_CASE)["trace"] == first["trace"]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_fact_strategy(), min_size=1, max_size=14))
def test_durable_rules_agrees_with_the_oracle(facts):
    facts = [normalise(f) for f in facts]
    unique = list({canonical(f): f for f in facts}.values())
    engine = sorted((h.rule.id, canonical(h.facts)) for h in FLAT_RUNNER.run(unique))
    oracle = sorted((r.id, canonical(b)) for r in FLAT_RUNNER.rules
                    for b in oracle_bindings(r.when, unique))
    assert engine == oracle


def test_fresh_processes_never_crash_on_state_deletion(tmp_path):
    """durable_rules' delete_state touches freed memory (a segfault in about a third of fresh
    runs): it is never called, and the engine runs in a worker in any case."""
    import subprocess
    import sys
    (tmp_path / "case.yaml").write_text("schema: qcdoctor/case-v1\n")
    code = ("import sys\nfrom pathlib import Path\n"
            "from qcdoctor.collectors.case_file import load_case\n"
            "from qcdoctor.engine.diagnosis.triage import triage_case\n"
            "print(triage_case(load_case(Path(sys.argv[1])))['conclusion']['stage'])\n")
    for _ in range(12):
        result = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True,
                                text=True, timeout=60)
        assert result.returncode == 0, result.stderr[-500:]
        assert result.stdout.strip() == "undetermined"


_scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=20),
                     st.floats(allow_nan=False, allow_infinity=False),
                     st.sampled_from([1e-4, 9.999e-5, 1e16, 9.9e15, -0.0, 1e-05]))


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.text(max_size=8), _scalars, max_size=8))
def test_the_fast_fact_encoder_writes_what_the_positional_writer_writes(fact):
    text = jsonfmt.dumps(fact)
    assert text == jsonfmt._encode(fact)
    assert json.loads(text) == fact
