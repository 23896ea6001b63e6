"""One rule picks the language of everything a run says: --lang / lang= first, then the
case's language, then the locale (docs/reports.md, Language). Each output is run under an
English and a Chinese locale, with and without --lang and a case language, and its prose
is read for Chinese characters."""

from __future__ import annotations

import io
import re
import sys

import pytest
import yaml

from qcdoctor.engine.commands.cli import main
from qcdoctor.engine.reports.locale_language import chosen_language

CJK = re.compile(r"[\u3000-\u303f\u3400-\u9fff\uff00-\uffef]")
ENGLISH, CHINESE = "en_US.UTF-8", "zh_CN.UTF-8"

# (locale, --lang, the case's language) -> the language the run must speak
RUNS = [
    (ENGLISH, None, None, "en"),
    (CHINESE, None, None, "zh"),
    (ENGLISH, None, "zh", "zh"),        # the case's language beats the locale
    (CHINESE, None, "en", "en"),
    (CHINESE, "en", "zh", "en"),        # --lang beats both
    (ENGLISH, "zh", "en", "zh"),
]
NO_CASE_RUNS = [(ENGLISH, None, "en"), (CHINESE, None, "zh"), (CHINESE, "en", "en"),
                (ENGLISH, "zh", "zh")]


def spoken(text: str) -> str:
    """zh when the text has Chinese characters, else en."""
    return "zh" if CJK.search(text) else "en"


@pytest.fixture
def locale(monkeypatch):
    def set_locale(value: str) -> None:
        monkeypatch.delenv("LC_ALL", raising=False)
        monkeypatch.delenv("LC_MESSAGES", raising=False)
        monkeypatch.setenv("LANG", value)
    return set_locale


def write_case(folder, language: str | None):
    """A convert drop, in English words only (no title, an English symptom)."""
    data = {"schema": "qcdoctor/case-v1", "symptom": "mAP drops after convert",
            "evidence": ["dataset_eval"], "platform": {"chip": "J6E"},
            "stages": {"qat_bc": {"metric": "mAP", "value": 0.449},
                       "quantized_bc": {"metric": "mAP", "value": 0.391}}}
    if language:
        data["language"] = language
    folder.mkdir(exist_ok=True)
    (folder / "case.yaml").write_text(yaml.safe_dump(data), encoding="utf-8")
    return folder


def lang_option(lang: str | None) -> list[str]:
    return ["--lang", lang] if lang else []


def test_the_rule_itself():
    english, chinese, plain = {"LANG": ENGLISH}, {"LC_ALL": CHINESE, "LANG": ENGLISH}, {}
    assert chosen_language(None, None, english) == "en"
    assert chosen_language(None, None, chinese) == "zh"      # LC_ALL before LANG
    assert chosen_language(None, None, plain) == "zh"        # no locale: the default
    assert chosen_language(None, "en", chinese) == "en"
    assert chosen_language("zh", "en", english) == "zh"


@pytest.mark.parametrize("command", ["triage", "audit"])
@pytest.mark.parametrize("where, lang, case_language, expected", RUNS)
def test_triage_and_audit_follow_the_rule(tmp_path, locale, capsys, command, where, lang,
                                          case_language, expected):
    locale(where)
    case = write_case(tmp_path / "case", case_language)
    assert main([command, str(case), "--format", "md", "--no-env", *lang_option(lang)]) == 0
    report = capsys.readouterr().out
    assert spoken(report) == expected, report[:400]


@pytest.mark.parametrize("where, expected", [(ENGLISH, "en"), (CHINESE, "zh")])
def test_a_case_built_in_python_follows_the_locale(locale, where, expected):
    import qcdoctor
    locale(where)
    case = qcdoctor.Case(chip="J6E", metric="mAP", evidence=["dataset_eval"],
                         stages={"qat_bc": 0.449, "quantized_bc": 0.391})
    report = case.triage(use_env=False)
    assert report.language == expected and spoken(report.to_markdown()) == expected


@pytest.mark.parametrize("where, lang, case_language, expected", RUNS)
def test_pack_prints_in_the_chosen_language(tmp_path, locale, capsys, where, lang,
                                            case_language, expected):
    locale(where)
    case = write_case(tmp_path / "case", case_language)
    bundle = tmp_path / "case.tar.gz"
    assert main(["pack", str(case), "-o", str(bundle), "--no-env", *lang_option(lang)]) == 0
    printed = capsys.readouterr().out
    assert printed.strip() and spoken(printed) == expected, printed


@pytest.mark.parametrize("where, lang, case_language, expected", RUNS)
def test_collect_names_sources_in_the_chosen_language(tmp_path, locale, capsys, where, lang,
                                                      case_language, expected):
    locale(where)
    case = write_case(tmp_path / "case", case_language)
    assert main(["collect", str(case), "--no-env", *lang_option(lang)]) == 0
    printed = capsys.readouterr().out
    assert ("[未提供]" if expected == "zh" else "[not given]") in printed
    assert spoken(printed) == expected


@pytest.mark.parametrize("where, lang, expected", NO_CASE_RUNS)
def test_the_examples_list_follows_the_locale(locale, capsys, where, lang, expected):
    locale(where)
    assert main(["examples", *lang_option(lang)]) == 0
    heading = capsys.readouterr().out.splitlines()[0]
    assert spoken(heading) == expected, heading


def test_examples_are_titled_in_their_own_language():
    from qcdoctor.engine.commands.examples import _case_data, example_names
    for name in example_names():
        case = _case_data(name)
        assert spoken(case["title"]) == case.get("language", "zh"), name


@pytest.mark.parametrize("where, lang, case_language, expected", RUNS)
def test_the_intake_asks_in_the_chosen_language(tmp_path, locale, capsys, monkeypatch, where,
                                                lang, case_language, expected):
    locale(where)
    folder = tmp_path / "case"
    if case_language:                   # a session begun earlier in that language
        folder.mkdir()
        (folder / "case.yaml").write_text(f"language: {case_language}\n", encoding="utf-8")
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))      # end of input at once
    main(["intake", str(folder), *lang_option(lang)])
    first = next(line for line in capsys.readouterr().out.splitlines() if line.strip())
    assert spoken(first) == expected, first


@pytest.mark.parametrize("where, lang, expected", NO_CASE_RUNS)
def test_rules_explain_follows_the_locale(locale, capsys, where, lang, expected):
    locale(where)
    assert main(["rules", "explain", "ST050", *lang_option(lang)]) == 0
    title = capsys.readouterr().out.splitlines()[0]
    assert spoken(title) == expected, title


@pytest.mark.parametrize("where, lang, expected", NO_CASE_RUNS)
def test_the_probe_summary_follows_the_locale(tmp_path, monkeypatch, locale, capsys, where,
                                              lang, expected):
    pytest.importorskip("torch")
    from tests.probe.test_probe import _cli_case
    locale(where)
    module = f"language_rule_models_{where[:2]}_{lang}"     # imported once a name
    _cli_case(tmp_path, monkeypatch, module)
    assert main(["probe", "--baseline", f"{module}:build", "--analysis",
                 f"{module}:build_rounded", "--inputs", "in.pt", "--out", "qa_probe",
                 "--no-sensitivity", "--device", "cpu", *lang_option(lang)]) == 0
    printed = capsys.readouterr().out
    assert spoken(printed) == expected, printed


@pytest.mark.parametrize("where, lang, expected", NO_CASE_RUNS)
def test_compare_models_shows_its_text_and_chart_in_the_chosen_language(tmp_path, locale,
                                                                        where, lang, expected):
    pytest.importorskip("torch")
    from qcdoctor.probe import compare_models
    from tests.probe.test_probe import EXAMPLE, models
    locale(where)
    base, qat = models()
    result = compare_models(base, qat, EXAMPLE, tmp_path / "probe", sensitivity=False,
                            lang=lang)
    shown = result._repr_html_()
    chart = re.search(r"<svg.*</svg>", shown, re.S).group(0)
    text = re.sub(r"<[^>]+>", " ", chart)       # the chart's labels, without its markup
    assert spoken(result._repr_markdown_()) == expected
    assert spoken(text) == expected, text[:300]


def test_compare_models_refuses_an_unknown_language(tmp_path):
    pytest.importorskip("torch")
    from qcdoctor.errors import QcdoctorError
    from qcdoctor.probe import compare_models
    from tests.probe.test_probe import EXAMPLE, models
    base, qat = models()
    with pytest.raises(QcdoctorError, match="lang"):
        compare_models(base, qat, EXAMPLE, tmp_path / "probe", lang="fr")
    assert not (tmp_path / "probe").exists()


def test_rules_explain_in_chinese_has_no_english_field_words(capsys):
    from qcdoctor.engine.commands.cli import main
    assert main(["rules", "explain", "LY030", "--lang", "zh"]) == 0
    text = capsys.readouterr().out
    for english in ("group:", "severity:", "priority:", "**Message:**", "**Why:**",
                    "When (all of)", "Then:", "Examples:"):
        assert english not in text, english
    assert "严重程度" in text and "条件（全部满足）" in text
