"""Fixes measured on many samples (probe/fix_samples.py): the trials on the worst samples
of the bad-case search as one batch, the recommended fix confirmed on every sample; where
the samples do not stack, the trials run on the sample read; a generator's one pass or no
fix reaching the target leaves the confirmation out, saying why."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")
yaml = pytest.importorskip("yaml")

from qcdoctor.probe import Samples, compare_models  # noqa: E402
from qcdoctor.probe.fix_samples import stacked  # noqa: E402
from tests.probe.test_badcase_search import LAYER, resnet10, samples  # noqa: E402
from tests.probe_nets import inject, narrowed, one_thread  # noqa: E402, F401 - one torch thread here


@pytest.fixture(scope="module")
def models():
    """(float model, clean QAT model, the QAT model with one output range cut to a quarter)."""
    fused, qat = resnet10()
    return fused, qat, inject(copy.deepcopy(qat), LAYER, scale_factor=0.25)


def fix_document(folder) -> dict:
    return yaml.safe_load((folder / "fix_trials.yaml").read_text(encoding="utf-8"))


def test_samples_stack_where_only_their_first_dimension_differs():
    a, b = torch.ones(1, 3, 4), torch.zeros(2, 3, 4)
    assert stacked([a, b]).shape == (3, 3, 4)
    joined = stacked([(a, {"mask": a}), (b, {"mask": b})])
    assert joined[0].shape == (3, 3, 4) and joined[1]["mask"].shape == (3, 3, 4)
    assert stacked([a, torch.ones(1, 3, 5)]) is None                    # another size
    assert stacked([a, a.double()]) is None                             # another dtype
    assert stacked([(a,), (a, a)]) is None                              # another structure
    assert stacked([{"x": a}, {"y": a}]) is None
    assert stacked([(a, 2), (a, 2)])[1] == 2 and stacked([(a, 2), (a, 3)]) is None


def test_a_fix_measured_on_the_worst_samples_is_confirmed_on_every_one(tmp_path, models):
    fused, _, faulty = models
    result = compare_models(fused, faulty, Samples(samples(24, bright=())), tmp_path / "p",
                            sensitivity=False, try_fixes=True, fix_samples=8)
    doc = fix_document(tmp_path / "p")
    assert doc == dict(result.fix_trials)
    found = doc["samples"]
    assert found["count"] == 24 and result.samples["chosen"] in found["measured_on"]
    assert len(found["measured_on"]) == 8
    # the eight worst by the search's metric on its output
    errors = sorted(range(24), key=lambda s: -result.sample_search.value(s, 0, "L1"))
    assert set(found["measured_on"]) == set(errors[:8])
    assert doc["trials"][0]["fix"] == "fixed_scale" and doc["forwards"] <= 6
    confirmed = found["confirmed"]
    assert confirmed["samples"] == 24 and confirmed["forwards"] == 48
    assert confirmed["improved_share"] >= 0.9 and confirmed["median_error_removed"] >= 0.85
    assert 0 <= confirmed["worst_after"]["sample"] < 24
    assert found["not_confirmed"] is None


def test_samples_that_do_not_stack_are_measured_on_the_sample_read(tmp_path, models):
    fused, _, faulty = models
    # the same forward calls, written two ways: a tensor, and a tuple of arguments
    mixed = samples(3, bright=()) + [(x,) for x in samples(6, bright=())[3:]]
    result = compare_models(fused, faulty, Samples(mixed), tmp_path / "p", sensitivity=False,
                            try_fixes=True)
    found = fix_document(tmp_path / "p")["samples"]
    assert found["measured_on"] == [result.samples["chosen"]]
    assert found["confirmed"]["samples"] == 6


def test_a_generator_is_not_confirmed_and_says_why(tmp_path, models):
    fused, _, faulty = models
    compare_models(fused, faulty, Samples(x for x in samples(6, bright=())), tmp_path / "p",
                   sensitivity=False, try_fixes=True)
    found = fix_document(tmp_path / "p")["samples"]
    assert found["confirmed"] is None and found["not_confirmed"] == "one_pass"


def test_no_fix_no_confirmation(tmp_path, models):
    fused, qat, _ = models
    compare_models(fused, qat, Samples(samples(4, bright=())), tmp_path / "p", sensitivity=False,
                   try_fixes=True, fix_target={"error_removed": 1.0, "cosine": 1.0})
    found = fix_document(tmp_path / "p")["samples"]
    assert found["not_confirmed"] == "no_fix" and found["confirmed"] is None


def test_the_report_says_measured_on_the_worst_and_confirmed_on_every_sample(tmp_path, models):
    """Triaged as a user's case (every format, both languages): FX022 states the samples,
    and the one-input caution (FX020) is gone."""
    from tests.probe_cases import triaged_case
    fused, _, faulty = models
    case = tmp_path / "case"
    compare_models(fused, faulty, Samples(samples(16, bright=())), case / "qa_probe", sensitivity=False,
                   try_fixes=True)
    report, facts = triaged_case(case, "accuracy drops after QAT")
    fired = {f["rule"] for f in report["findings"]} | \
        {c["rule"] for c in report.get("cautions", [])}
    assert "FX022" in fired and "FX020" not in fired
    (summary,) = facts["fix_trials"]
    assert summary["samples"] == 16 and summary["measured_on"] == 8 and summary["confirmed"]


def test_the_trials_measure_the_worst_samples_that_show_the_error(tmp_path, models):
    """The clean model's error measured: of the eight worst samples, only the two bright
    ones the calibrated ranges clip show the error; the others hold the clean model's own
    error, which no fix takes away. The trials measure the two (and the sample read is one
    of them)."""
    from tests.probe.test_badcase_search import BRIGHT
    fused, qat, _ = models
    result = compare_models(fused, qat, Samples(samples()), tmp_path / "p",
                            sensitivity=False, try_fixes=True, fix_samples=8)
    assert result.samples["rounding_factor"] == 10.0 and result.samples["shown_on"] == 2
    found = fix_document(tmp_path / "p")["samples"]
    assert sorted(found["measured_on"]) == sorted(BRIGHT)
    assert result.samples["chosen"] in BRIGHT


def test_the_share_removed_is_of_the_error_beyond_the_clean_models(tmp_path, models):
    """Over samples with the clean model's error measured, the trials' figures count from
    it: fix_trials.yaml holds the clean model's figure on the measured batch, a note says
    which way it was used, every trial's share removed is of the error beyond it, and
    triage reads the file."""
    from tests.probe_cases import triaged_case
    fused, qat, _ = models
    case = tmp_path / "case"
    result = compare_models(fused, qat, Samples(samples()), case / "qa_probe",
                            sensitivity=False, try_fixes=True, fix_samples=8)
    doc = fix_document(case / "qa_probe")
    clean, before = doc["clean"], doc["before"]
    assert before < clean <= 1.0                  # the clips are beyond the clean model
    assert any(n.startswith("clean_floor:") for n in doc["notes"])
    for trial in doc["trials"]:
        expected = 1 - ((1 - trial["after"]) - (1 - clean)) / ((1 - before) - (1 - clean))
        assert trial["error_removed"] == round(min(1.0, max(0.0, expected)), 4)
    report, facts = triaged_case(case, "accuracy drops after QAT")
    assert facts["fix_trials"][0]["measured"] is not None
    assert not [p for p in facts.get("artifact_problem", []) if "fix_trials" in str(p)]
    assert result.fix_trials["clean"] == clean


def test_a_clamp_some_inputs_reach_is_found_read_and_fixed_on_the_dataset(tmp_path, models):
    """The head's output fake quant (a plain torch.ao one) narrowed to half its range:
    only the samples with the largest logits reach past it. The search finds them (some
    samples, not all: the clean model's error measured), the reading on the worst by L1
    locates the clamp at the head, its range is tried first and reaches the target in two passes
    on the samples that show it, and the fix confirmed on every sample helps the dataset;
    triaged, the report says on how many samples it shows and that the fix was measured
    on the worst and confirmed on all (every format, both languages)."""
    from tests.probe_cases import triaged_case
    fused, qat, _ = models
    case = tmp_path / "case"
    result = compare_models(fused, narrowed(qat, "output", 0.5), Samples(samples(24, bright=())),
                            case / "qa_probe", sensitivity=True, try_fixes=True)
    found = result.samples
    assert found["rounding_factor"] == 10.0 and 0 < found["shown_on"] < found["count"] == 24
    search = result.sample_search
    doc = fix_document(case / "qa_probe")
    assert doc["candidates"] == ["output"] and doc["forwards"] <= 6
    assert any(n.startswith("located_first:") for n in doc["notes"])
    best = result.fix_trials.recommended()
    assert best["fix"] == "fixed_scale" and best["layers"] == ["output"]
    # the worst samples that show it, and the sample read (the worst by L1: its clean
    # model's error may hold most of its own)
    measured = doc["samples"]["measured_on"]
    assert all(search.shows_any(s) for s in measured if s != found["chosen"])
    assert sum(search.shows_any(s) for s in measured) >= 3
    confirmed = doc["samples"]["confirmed"]
    assert confirmed["samples"] == 24 and confirmed["improved_share"] >= 0.8
    assert confirmed["median_error_removed"] >= 0.5
    report, facts = triaged_case(case, "accuracy drops after QAT")
    rules = {f["rule"] for f in report["findings"]}
    assert {"LY061", "LY064", "FX022"} <= rules, rules
