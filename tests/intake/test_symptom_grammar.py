"""The symptom sentence read by its grammar: each number paired with the stage its clause
names, in English and Chinese ("from ... to ...", "A 的 X 从 ... 掉到 ...", "X on A while B
gives Y"), percentages stored as the fraction the user wrote, the chip and the metric
taken from the sentence; differences and numbers tied to no stage never offered; an
ambiguous sentence offers nothing and keeps the readings it allows, to be asked about."""

from __future__ import annotations

import pytest

from qcdoctor.engine.intake.questions import AnswerError
from qcdoctor.engine.intake.symptom_hints import read_symptom
from qcdoctor.engine.intake.symptom_question import parse_words, reading_question
from qcdoctor.engine.intake.written_numbers import written_value
from tests.intake.test_intake import _question

CONVERT = {"qat_bc": 0.449, "quantized_bc": 0.391}
TOP1 = {"qat_bc": 0.765, "quantized_bc": 0.712}

# (sentence, values, metric, chip): each a form the grammar reads, English then Chinese
SENTENCES = [
    # the issue's own sentences
    ("mAP falls from 0.449 on qat.bc to 0.391 on quantized.bc on J6E", CONVERT, "mAP", "J6E"),
    ("J6E 上 quantized.bc 的 mAP 从 qat.bc 的 0.449 掉到 0.391", CONVERT, "mAP", "J6E"),
    ("top1 acc on quantized.bc is 71.2% while qat.bc gives 76.5%", TOP1, "top1 acc", None),
    # from ... to ...
    ("mAP drops from 0.449 (qat.bc) to 0.391 (quantized.bc) on J6M", CONVERT, "mAP", "J6M"),
    ("qat.bc mAP falls from 0.449 to 0.391 on quantized.bc", CONVERT, "mAP", None),
    ("On J6M, NDS goes from 0.512 on qat.pt to 0.47 on qat.bc",
     {"qat": 0.512, "qat_bc": 0.47}, "NDS", "J6M"),
    ("from qat.bc to quantized.bc, mAP falls from 0.449 to 0.391", CONVERT, "mAP", None),
    ("mAP drops by 0.058 from qat.bc 0.449 to quantized.bc 0.391 on s100", CONVERT, "mAP", "S100"),
    ("quantized.bc mAP drops from 0.449 to 0.391", {"quantized_bc": 0.391}, "mAP", None),
    # X on A while B gives Y
    ("Top-1 accuracy on the board is 70.1% whereas hbm gives 75.3%",
     {"board": 0.701, "hbm_x86": 0.753}, "Top-1 accuracy", None),
    ("mIoU on quantized.bc is 61.5% but qat.bc gets 64.0%",
     {"quantized_bc": 0.615, "qat_bc": 0.64}, "mIoU", None),
    ("quantized.bc is 0.391 while qat.bc gives 0.449, a drop of 0.058", CONVERT, None, None),
    ("qat.bc and quantized.bc: 0.449 and 0.391 respectively", CONVERT, None, None),
    # A 的 X 从 ... 掉到 ...
    ("J6M 上 hbm 的 NDS 从 quantized.bc 的 0.512 降到 0.47",
     {"quantized_bc": 0.512, "hbm_x86": 0.47}, "NDS", "J6M"),
    ("quantized.bc 的 top1 从 qat.bc 的 76.5% 掉到 71.2%", TOP1, "top1", None),
    ("板端的 mAP 从仿真的 0.443 掉到 0.30", {"hbm_x86": 0.443, "board": 0.30}, "mAP", None),
    ("mAP 从 0.449 掉到 0.391，从 qat.bc 到 quantized.bc", CONVERT, "mAP", None),
    # X 是 ... 而 Y 是 ...
    ("quantized.bc 上 top1 acc 是 71.2%，而 qat.bc 是 76.5%", TOP1, "top1 acc", None),
    ("quantized.bc 的 mAP 是 0.391，qat.bc 是 0.449，下降了 0.058", CONVERT, "mAP", None),
    ("qat.bc 和 quantized.bc 分别是 0.449 和 0.391", CONVERT, None, None),
    ("在J6E上，quantized.bc的mAP只有0.391，qat.bc是0.449", CONVERT, "mAP", "J6E"),
    ("quantized.bc 的 mAP 0.391 比 qat.bc 的 0.449 低", CONVERT, "mAP", None),
    ("J6P上板端mAP 0.30，仿真0.443", {"board": 0.30, "hbm_x86": 0.443}, "mAP", "J6P"),
]


@pytest.mark.parametrize("symptom, values, metric, chip", SENTENCES, ids=[s[0] for s in SENTENCES])
def test_each_number_is_stored_with_the_stage_its_clause_names(symptom, values, metric, chip):
    reading = read_symptom(symptom)
    assert (reading.values, reading.metric, reading.chip, reading.ambiguous) == \
        (values, metric, chip, False)


@pytest.mark.parametrize("written, stored", [("71.2%", 0.712), ("76.5%", 0.765), ("45.2%", 0.452),
                                             ("39.1 %", 0.391), ("0.1%", 0.001),
                                             ("64.0％", 0.64), ("0.449", 0.449)])
def test_a_percentage_is_the_fraction_the_user_wrote_not_its_float_noise(written, stored):
    assert written_value(written) == stored
    assert repr(written_value(written)) == repr(stored)      # 0.712, never 0.7120000000000001


def test_a_percentage_in_a_sentence_is_stored_as_written():
    values = read_symptom("top1 acc on quantized.bc is 71.2% while qat.bc gives 76.5%").values
    assert [repr(v) for v in values.values()] == ["0.712", "0.765"]


@pytest.mark.parametrize("symptom", [
    "the drop is 0.06 on the board",
    "quantized.bc 下降了 0.058",
    "mAP drops by 0.058 on quantized.bc",
    "qat.bc 与 quantized.bc 差距是 0.06"])
def test_a_difference_is_never_a_stage_value(symptom):
    reading = read_symptom(symptom)
    assert reading.values == {} and not reading.readings
    assert all(n.difference for n in reading.numbers)


def test_a_number_tied_to_no_stage_is_never_offered():
    # 0.449 is the value quantized.bc fell from: no stage is named for it
    reading = read_symptom("quantized.bc mAP drops from 0.449 to 0.391")
    assert reading.values == {"quantized_bc": 0.391}
    assert next(n for n in reading.numbers if n.text == "0.449").stages == ()


@pytest.mark.parametrize("symptom, readings", [
    ("qat.bc and quantized.bc: 0.449 and 0.391",
     [CONVERT, {"qat_bc": 0.391, "quantized_bc": 0.449}]),
    ("qat.bc 和 quantized.bc 是 0.449 和 0.391",
     [CONVERT, {"qat_bc": 0.391, "quantized_bc": 0.449}]),
    ("quantized.bc 比 qat.bc 低：0.391 vs 0.449",
     [CONVERT, {"qat_bc": 0.391, "quantized_bc": 0.449}]),
    ("qat.bc and quantized.bc: 0.449", [{"qat_bc": 0.449}, {"quantized_bc": 0.449}])])
def test_an_ambiguous_sentence_offers_nothing_and_keeps_its_readings(symptom, readings):
    reading = read_symptom(symptom)
    assert reading.ambiguous and reading.values == {}
    assert list(reading.readings) == readings                   # likeliest first


@pytest.mark.parametrize("symptom", [
    "mAP and NDS of quantized.bc are 0.391 and 0.5",            # two metrics
    "qat.bc 0.449, qat.bc 0.45",                                # one stage, two numbers
])
def test_an_ambiguous_sentence_with_no_reading_asks_nothing(symptom):
    reading = read_symptom(symptom)
    assert reading.ambiguous and reading.values == {} and reading.readings == ()
    assert reading_question(reading) is None


@pytest.mark.parametrize("lang, parse", [
    ("en", "0.449 → qat.bc or quantized.bc; 0.391 → quantized.bc or qat.bc; metric mAP; "
           "chip J6E"),
    ("zh", "0.449 → qat.bc 或 quantized.bc；0.391 → quantized.bc 或 qat.bc；指标 mAP；芯片 J6E")])
def test_the_parse_is_shown_in_the_question_an_ambiguous_sentence_asks(lang, parse):
    reading = read_symptom("on J6E, qat.bc and quantized.bc mAP: 0.449 and 0.391")
    assert parse_words(reading, lang) == parse
    question = reading_question(reading)
    assert parse in question.why[lang]
    assert question.parse("1", lang) == "reading_1" and question.parse("2", lang) == "reading_2"
    for none in ("n", "none", "无"):
        assert question.parse(none, lang) == "none"
    with pytest.raises(AnswerError):
        question.parse("4", lang)


def test_the_parse_says_what_a_percentage_becomes_and_what_is_left_out():
    reading = read_symptom("quantized.bc top1 drops by 5.3% from 76.5% to 71.2%")
    words = parse_words(reading, "en")
    assert "5.3% = 0.053 → a difference, no stage's result" in words
    assert "76.5% = 0.765 → no stage named (not used)" in words
    assert "71.2% = 0.712 → quantized.bc" in words


def test_the_chip_is_only_the_one_the_sentence_names():
    assert read_symptom("J6E and J6M both drop on quantized.bc").chip is None
    assert read_symptom("on j6m quantized.bc drops").chip == "J6M"


def test_a_stage_prompt_takes_a_percentage_as_the_symptom_does():
    question = _question("stages.qat")
    assert question.parse("45.2%", "en") == {"value": 0.452}
    assert repr(question.parse("71.2 %", "zh")["value"]) == "0.712"
    with pytest.raises(AnswerError) as refused:
        question.parse("45.2%%", "en")
    assert "give a number" in str(refused.value)


def test_a_number_tied_to_no_stage_is_never_a_choice_of_the_reading_asked_about():
    # quantized.bc's fall is certain; 0.449 is tied to no stage while qat.bc has no number
    reading = read_symptom("quantized.bc mAP drops from 0.449 to 0.391 while qat.bc is fine")
    assert reading.ambiguous and reading.values == {}
    assert reading.readings == ({"quantized_bc": 0.391},)
    question = reading_question(reading)
    assert all("0.449" not in question.choice_note(c, "en") for c in question.choices)
    assert "0.449 → no stage named (not used)" in question.why["en"]
