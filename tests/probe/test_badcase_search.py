"""The probe over many samples (probe/badcase_search.py): both models over every sample,
each output's error kept per sample, the layers read on the worst sample; badcase.txt in
the profiler's layout (read back by the badcase collector and by triage) and
sample_errors.csv. A clamp only bright inputs reach (the input range calibrated on
normal images) is found on a bright sample and read at the input; a fault everywhere (an
output range cut to a tenth at one conv) shows on every sample."""

from __future__ import annotations

import copy
import csv

import pytest

torch = pytest.importorskip("torch")

from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

from qcdoctor.collectors.badcase import worst_indices_from_txt  # noqa: E402
from qcdoctor.engine.commands.probe import search_line  # noqa: E402
from qcdoctor.engine.reports.formats import render_output  # noqa: E402
from qcdoctor.errors import QcdoctorError  # noqa: E402
from qcdoctor.probe import Samples, compare_models  # noqa: E402
from qcdoctor.probe.badcase_files import SAMPLE_ERRORS_COLUMNS  # noqa: E402
from qcdoctor.wording import labels  # noqa: E402
from tests.probe_cases import triaged_case  # noqa: E402
from tests.probe_nets import (  # noqa: E402
    inject,
    narrowed,
    network,
    one_thread,  # noqa: F401 - an autouse fixture: one torch thread here
    quantize,
)

SIZE = 32
LAYER = "features.stage2.unit1.body.conv1.conv"
BRIGHT = (5, 11)


def resnet10() -> tuple:
    """(fused float resnet10, its calibrated FX QAT copy) at SIZE pixels."""
    example = torch.randn(2, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(3))
    return quantize(network("resnet10", SIZE), example, batches=2, batch_size=16)


@pytest.fixture(scope="module")
def models():
    return resnet10()


def samples(count: int = 16, bright=BRIGHT, gain: float = 3.0,
            size: int = SIZE) -> list[torch.Tensor]:
    """``count`` random images, those at ``bright`` ``gain`` times brighter."""
    generator = torch.Generator().manual_seed(7)
    return [torch.randn(1, 3, size, size, generator=generator) * (gain if i in bright else 1.0)
            for i in range(count)]


def read_errors(folder) -> list[dict]:
    with open(folder / "sample_errors.csv", encoding="utf-8", newline="") as handle:
        return list(csv.DictReader(handle))


def first_broken_row(result, below: float = 0.99) -> str:
    """The first compared row whose Cosine falls below ``below``."""
    return next(row["mod_name"] for row in result.rows
                if isinstance(row.get("cosine"), float) and row["cosine"] < below)


def test_a_clamp_only_bright_inputs_reach_is_read_on_a_bright_sample(tmp_path, models):
    """The model's input quantizer was calibrated on normal images: only the bright ones
    pass its range and are clamped there; the others keep the clean model's error (Cosine
    0.987 to 0.999 here), within the tolerance."""
    fused, qat = models
    result = compare_models(fused, qat, Samples(samples()), tmp_path / "p",
                            sensitivity=False, sample_tolerance=0.98)
    found = result.samples
    assert found["count"] == 16 and found["chosen_by"] == "worst"
    assert found["chosen"] in BRIGHT and found["rank"] == 1
    assert found["shown_on"] == len(BRIGHT) and found["tolerance_cosine"] == 0.98
    # read on the bright sample, the clamped input is where the error starts
    assert first_broken_row(result) == "x"
    rows = read_errors(tmp_path / "p")
    assert list(rows[0]) == list(SAMPLE_ERRORS_COLUMNS)
    assert len(rows) == 16 and [int(r["sample"]) for r in rows] == list(range(16))
    # the bright samples are the two worst by the chosen metric
    by_l1 = sorted(rows, key=lambda r: -float(r["L1"]))
    assert {int(r["sample"]) for r in by_l1[:2]} == set(BRIGHT)
    # badcase.txt names the chosen sample for L1, read as the profiler's file is
    worst = worst_indices_from_txt(tmp_path / "p" / "badcase.txt")
    assert worst["L1"] == {found["chosen"]}
    assert set(worst) == {"L1", "MSE", "KL", "ATOL", "Cosine", "SQNR"}
    assert (tmp_path / "p" / "badcase.txt").name in {p.name for p in result.files}


def test_a_fault_everywhere_shows_on_every_sample(tmp_path, models):
    fused, qat = models
    faulty = inject(copy.deepcopy(qat), LAYER, scale_factor=0.1)
    result = compare_models(fused, faulty, Samples(samples(bright=())), tmp_path / "p",
                            sensitivity=False)
    assert result.samples["shown_on"] == 16 == result.samples["count"]
    assert all(r["shown"] == "1" for r in read_errors(tmp_path / "p"))


def test_a_chosen_sample_is_read_with_its_rank(tmp_path, models):
    fused, qat = models
    faulty = inject(copy.deepcopy(qat), LAYER, scale_factor=0.5)
    result = compare_models(fused, faulty, Samples(samples()), tmp_path / "p",
                            sensitivity=False, badcase=2)
    found = result.samples
    assert found["chosen"] == 2 and found["chosen_by"] == "given"
    rows = read_errors(tmp_path / "p")
    mine = float(rows[2]["L1"])
    assert found["rank"] == 1 + sum(float(r["L1"]) > mine for r in rows)
    # the layers were read on sample 2 itself: its output row's numbers are that sample's
    alone = compare_models(fused, faulty, samples()[2], tmp_path / "one", sensitivity=False)
    assert [r.get("cosine") for r in result.rows] == [r.get("cosine") for r in alone.rows]


def test_max_samples_searches_the_first_ones(tmp_path, models):
    fused, qat = models
    result = compare_models(fused, qat, Samples(samples()), tmp_path / "p", sensitivity=False,
                            max_samples=4)
    assert result.samples["count"] == 4
    assert len(read_errors(tmp_path / "p")) == 4


def test_a_loader_gives_a_batch_a_call_and_a_generator_one_pass(tmp_path, models):
    fused, qat = models
    images = torch.cat(samples(count=8, bright=(6,)))
    loader = DataLoader(TensorDataset(images), batch_size=2, shuffle=False)
    # TensorDataset batches are one-element lists: each is the call's positional arguments
    result = compare_models(fused, qat, loader, tmp_path / "loader", sensitivity=False)
    assert result.samples["count"] == 4 and result.samples["chosen"] == 3
    assert result.samples["replayable"] is True
    generated = Samples(x for x in samples(count=5))
    result = compare_models(fused, qat, generated, tmp_path / "generated", sensitivity=False)
    assert result.samples["count"] == 5 and result.samples["replayable"] is False


@pytest.mark.parametrize("inputs, options, expected", [
    (lambda: DataLoader(TensorDataset(torch.randn(4, 3, SIZE, SIZE)), batch_size=2,
                        shuffle=True), {}, "shuffles"),
    (lambda: Samples([]), {}, "the samples are empty"),
    (lambda: Samples(["not a tensor"]), {}, "sample 0 is a str"),
    (lambda: Samples([torch.ones(1, 3, SIZE, SIZE), torch.full((1, 3, SIZE, SIZE), float("nan"))]),
     {}, "sample 1 holds"),
    (lambda: Samples([torch.ones(1, 3, SIZE, SIZE)]), {"badcase": 3}, "past the last sample"),
    (lambda: torch.ones(1, 3, SIZE, SIZE), {"max_samples": 2}, "choose among many samples"),
    (lambda: Samples([torch.ones(1, 3, SIZE, SIZE)]), {"max_samples": 0}, "max_samples is 0"),
    (lambda: Samples([torch.ones(1, 5, SIZE, SIZE)]), {}, "fails on sample 0"),
])
def test_bad_samples_are_one_clear_error_and_write_nothing(tmp_path, models, inputs, options,
                                                          expected):
    fused, qat = models
    with pytest.raises(QcdoctorError, match=expected):
        compare_models(fused, qat, inputs(), tmp_path / "p", sensitivity=False, **options)
    assert not (tmp_path / "p").exists()


def test_a_search_folder_is_triaged_as_the_profilers_badcase_is(tmp_path, models):
    fused, qat = models
    faulty = inject(copy.deepcopy(qat), LAYER, scale_factor=0.5)
    case = tmp_path / "case"
    compare_models(fused, faulty, Samples(samples()), case / "qa_probe", sensitivity=False)
    report, facts = triaged_case(case, "accuracy drops after QAT")
    folder = next(f for f in facts["qa_folder"] if f["analysis"] == "qa_probe")
    assert folder["has_badcase"] is True
    spread = facts["badcase_spread"][0]
    assert spread["analysis"] == "qa_probe" and spread["metrics"] == 6
    problems = [f for f in facts.get("problem", []) if "badcase" in str(f) or
                "sample_errors" in str(f)]
    assert not problems, problems


def finding_ids(report) -> set[str]:
    return {f["rule"] for f in report["findings"]}


def test_a_clean_control_reads_within_the_clean_models_error(tmp_path, models):
    """The clean QAT model at 32x32: below the clean band on most samples through its
    steps alone (Cosine 0.987 to 0.999), but no sample past ten times the error of its
    steps without clipping: no sample shows the error, and triage says the samples are
    within the clean model's error (LY066), not that the error shows on all of them."""
    fused, qat = models
    case = tmp_path / "case"
    result = compare_models(fused, qat, Samples(samples(bright=())), case / "qa_probe",
                            sensitivity=False)
    found = result.samples
    assert found["rounding_factor"] == 10.0 and found["shown_on"] == 0
    assert found["below_tolerance"] >= 8             # the band alone would call it broken
    rows = read_errors(case / "qa_probe")
    assert all(r["shown"] == "0" and 0.98 < float(r["rounding_Cosine"]) <= 1.0 for r in rows)
    report, facts = triaged_case(case, "accuracy drops after QAT")
    search = facts["sample_search"][0]
    assert search["shown"] == "none" and search["rounding_known"] is True
    assert search["below_tolerance"] == found["below_tolerance"]
    assert "LY066" in finding_ids(report) and "LY063" not in finding_ids(report)
    assert "within the clean model's error" in render_output(report, "md")
    # the probe's own line says the same, in both languages
    for lang, words in (("en", "within the clean model's error"), ("zh", "干净模型的误差之内")):
        line = search_line(found, labels()[lang]["probe"], lang)
        assert words in line and f"{found['below_tolerance']}" in line, line


def test_a_clamp_past_the_clean_models_error_shows_where_it_clips(tmp_path, models):
    """The default tolerance, the clean model's error measured: the bright samples the
    input quantizer clips show the error (hundreds of times their steps' own), the others
    are within it; a plain quantizer clamped to a tenth of its range clips every sample."""
    fused, qat = models
    bright = compare_models(fused, qat, Samples(samples()), tmp_path / "bright",
                            sensitivity=False).samples
    assert bright["rounding_factor"] == 10.0 and bright["shown_on"] == len(BRIGHT)
    assert bright["chosen"] in BRIGHT
    shown = {int(r["sample"]) for r in read_errors(tmp_path / "bright") if r["shown"] == "1"}
    assert shown == set(BRIGHT)
    everywhere = compare_models(fused, narrowed(qat, LAYER, 0.1), Samples(samples(bright=())),
                                tmp_path / "everywhere", sensitivity=False).samples
    assert everywhere["rounding_factor"] == 10.0
    assert everywhere["shown_on"] == everywhere["count"] == 16


def test_a_quantizer_the_probe_cannot_round_leaves_the_tolerance_alone(tmp_path, models):
    """A quantizer of a kind the probe does not mirror (here a test's own fake quant)
    would keep its clamp in the clean model: its clamp would read as clean. So the clean
    model's error is not measured at all, and the tolerance alone decides."""
    fused, qat = models
    faulty = inject(copy.deepcopy(qat), LAYER, scale_factor=0.1)
    found = compare_models(fused, faulty, Samples(samples(bright=())), tmp_path / "p",
                           sensitivity=False).samples
    assert found["rounding_factor"] is None
    assert found["shown_on"] == found["below_tolerance"] == 16
    assert all(r["rounding_Cosine"] == "nan" for r in read_errors(tmp_path / "p"))
