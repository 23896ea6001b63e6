"""Generated code speaks the report's language in its comments, and only there.

Every snippet variant (the contexts of test_snippets_compile, every rule's firing
examples, hostile values) is rendered in English and in Chinese: the Chinese code
compiles, differs from the English only inside comments, holds no English prose in
them, and the catalogue (templates/snippet_comments.yaml) holds exactly the messages
the templates mark; the English code stays what it was.
"""

from __future__ import annotations

import ast
import hashlib
import io
import json
import os
import re
import subprocess
import sys
import tokenize
from functools import lru_cache
from importlib import resources

import pytest

from qcdoctor.collectors.case_file import load_case
from qcdoctor.engine.commands.examples import example_names, example_path
from qcdoctor.engine.diagnosis.snippets import (
    _environment,
    catalogue,
    comment,
    message_key,
    python_literal,
    render_snippet,
    translator,
)
from qcdoctor.engine.diagnosis.triage import triage_case
from qcdoctor.engine.matching.derived import fill
from qcdoctor.engine.matching.patterns import oracle_bindings
from qcdoctor.fact_types import FIX_KINDS, STAGES, normalise
from qcdoctor.templating import _load
from qcdoctor.vocabulary import ANALYSIS_TYPE_STAGES
from tests.diagnosis.test_snippet_injection import HOSTILE, _names
from tests.diagnosis.test_snippets_compile import AWKWARD, CONTEXTS, _snippet_rules
from tests.reports.test_report_language import ALLOWED


def _variants() -> list[tuple[str, dict]]:
    """Every branch of every template, with no rule involved (their output is fixed by
    the templates and engine/diagnosis/snippets.py alone)."""
    variants = [("evaluate_stage", {"stage_to_evaluate": s}) for s in (*STAGES, "nowhere")]
    for kind, (baseline, analysis) in ANALYSIS_TYPE_STAGES.items():
        for b, a in sorted({(baseline, analysis), ("qat_export", "quantized_bc"),
                            ("qat", "qat_bc"), ("float", "calib")}):
            variants.append(("quant_analysis", {"analysis_model_type": kind, "baseline": b,
                                                "analysis": a}))
    variants += [("consistency_level", {"level": level, "old_level": old})
                 for level, old in ((0, 0), (1, 2), (2, 4), (1, None))]
    variants += [("fixed_scale", {"layer": AWKWARD, "limit": limit}) for limit in (None, "1.5e+05")]
    variants += [("qint16", {"layer": AWKWARD}), ("qint16", {"layer": "head.cls"}),
                 ("lut_bisect", {"ops": f"{AWKWARD},backbone.exp"}), ("lut_bisect", {}),
                 ("convert_analysis", {}), ("convert_sensitivity", {"out_dir": "qa_sens"}),
                 ("bc_editor", {}), ("user_side_checks", {})]
    variants += [("qdq_compare", {"quantize": q, "dequantize": d})
                 for q in ("yes", "no", None) for d in ("yes", "no", None)]
    variants += [("measured_fix", {"fix": fix, "layers": f"{AWKWARD}, backbone.s3.conv",
                                   "rank": rank})
                 for fix in FIX_KINDS for rank in ("measured", "located")]
    # a measured fixed scale of one layer: its threshold, as measured, filled in
    variants += [("measured_fix", {"fix": "fixed_scale", "layers": AWKWARD, "rank": "measured",
                                   "limit": "0.781675"})]
    # a probe of a torch.ao model: the fix code in torch.ao's API (eager and FX)
    for flow in ("torch_ao_eager", "torch_ao_fx"):
        variants += [("measured_fix", {"fix": fix, "layers": f"{AWKWARD}, backbone.s3.conv",
                                       "rank": rank, "flow": flow, "folder": "qa_probe"})
                     for fix in FIX_KINDS for rank in ("measured", "located")]
        variants += [("measured_fix", {"fix": "fixed_scale", "layers": AWKWARD,
                                       "rank": "measured", "flow": flow, "limit": "0.78",
                                       "folder": "qa_probe",
                                       "qparams": "0.005583392921835184,140,0,255"}),
                     ("fixed_scale", {"layer": AWKWARD, "limit": "1.5e+05", "flow": flow}),
                     ("fixed_scale", {"layer": AWKWARD, "flow": flow}),
                     ("qint16", {"layer": AWKWARD, "flow": flow})]
    # a qconfig change before QAT has run is calibrated again (knowledge.md §17 R4.6)
    variants += [(name, {**action, "cost": "recalibrate"}) for name, action in variants
                 if name in ("fixed_scale", "qint16", "measured_fix")]
    variants += [("export_state_check", {}),
                 ("probe_fix_trials", {"analysis_model_type": "fake_quant", "baseline": "float",
                                       "analysis": "calib", "out_dir": "qa_probe_fixes"})]
    variants += [(name, {"layer": value, "out_dir": value, "ops": value})
                 for name in _names() for value in HOSTILE[::3]]
    return variants


_PLUGIN_NUMBERING = ("new", "old", "unknown")


def _contexts() -> list[dict]:
    return [{**context, "plugin_numbering": _PLUGIN_NUMBERING[i % 3]}
            for i, context in enumerate(CONTEXTS)]


def _rule_actions() -> list[tuple[str, dict]]:
    actions = []
    for rule in _snippet_rules():
        for case in rule.examples["fires"]:
            facts = [normalise(f) for f in case]
            for bindings in oracle_bindings(rule.when, facts):
                action = fill(rule.then["next_action"], bindings)
                actions.append((action["snippet"], action))
    return actions


@lru_cache(maxsize=None)
def _rendered(lang: str) -> tuple[tuple[str, str, dict], ...]:
    """(key, code, values from the case) of every render, then of every bundled example."""
    out = []
    contexts = _contexts()
    for name, action in _variants() + _rule_actions():
        for i, context in enumerate(contexts):
            key = f"{name} {json.dumps(action, sort_keys=True, ensure_ascii=False)} {i}"
            out.append((key, render_snippet(name, {"id": name, **action}, context, lang=lang),
                        {**action, **context}))
    for name in example_names():
        with example_path(name) as path:
            report = triage_case(load_case(path), lang=lang, environ={}, installed={}, cwd=path)
        out += [(f"{name}:{a['id']}", a["code"], {}) for a in report["next_actions"] if a.get("code")]
    return tuple(out)


def _pairs():
    en, zh = _rendered("en"), _rendered("zh")
    assert [k for k, _, _ in en] == [k for k, _, _ in zh]
    return [(key, en_code, zh_code, values)
            for (key, en_code, values), (_, zh_code, _) in zip(en, zh, strict=True)]


def _comments(code: str) -> list[tokenize.TokenInfo]:
    return [t for t in tokenize.generate_tokens(io.StringIO(code).readline)
            if t.type == tokenize.COMMENT]


def _without_comments(code: str) -> list[str]:
    """The code's lines with every comment token cut off; lines that were only a comment
    are left out (a translation may take more or fewer lines than the English)."""
    cut = {t.start[0]: t.start[1] for t in _comments(code)}
    lines = []
    for number, line in enumerate(code.splitlines(), 1):
        if number in cut:
            line = line[:cut[number]].rstrip()
            if not line:
                continue
        lines.append(line)
    return lines


# --- what counts as English prose in a comment ---------------------------------------

_CODE_NODES = (ast.Call, ast.Import, ast.ImportFrom, ast.Assign, ast.Attribute, ast.Subscript,
               ast.Constant)
_BACKTICKED = re.compile(r"`[^`]*`")
# a quote that opens a string, not an apostrophe inside a word ("run 1's")
_QUOTED = re.compile(r"(?<![A-Za-z])(\"[^\"]*\"|'[^']*')(?![A-Za-z])")
_WORD = re.compile(r"[A-Za-z]+(?:['-][A-Za-z]+)*")
_EDGE_PUNCTUATION = "([{\"'"
_END_PUNCTUATION = ".,;:!?)]}\"'"


def _commented_out_code(body: str) -> bool:
    """``#   FixedScaleObserver(scale=...)``: a comment holding code, not prose (a bare
    ``not exposed`` parses too, but holds no call, import, assignment or literal)."""
    try:
        tree = ast.parse(body.strip())
    except SyntaxError:
        return False
    return any(isinstance(node, _CODE_NODES) for node in ast.walk(tree))


def english_prose(text: str, values: dict | None = None) -> list[str]:
    """Runs of two or more English words (3+ letters) in a comment's text, once code is
    taken out: the case's own values, backticked spans, quoted strings, names with dots,
    underscores, digits or brackets; commented-out code has none. Acronyms (QAT, LUT)
    and the toolchain terms Chinese reports keep in Latin letters (test_report_language)
    neither count nor break a run."""
    body = text.lstrip("#")
    if _commented_out_code(body):
        return []
    for value in (values or {}).values():          # user text: any language is theirs
        for form in _value_forms(value):
            body = body.replace(form, " ")
    body = _QUOTED.sub(" ", _BACKTICKED.sub(" ", body))
    runs, run = [], []
    for chunk in body.split():
        core = chunk.lstrip(_EDGE_PUNCTUATION).rstrip(_END_PUNCTUATION)
        word = _WORD.fullmatch(core)
        if word and (core.isupper() or core in ALLOWED):
            pass                                    # a name: transparent
        elif word and sum(c.isalpha() for c in core) >= 3:
            run.append(core)
        else:
            runs.append(run)
            run = []
        if chunk != chunk.rstrip(_END_PUNCTUATION) and chunk.rstrip(_END_PUNCTUATION):
            runs.append(run)                        # "located:" ends its run
            run = []
    runs.append(run)
    return [" ".join(r) for r in runs if len(r) >= 2]


def _value_forms(value) -> list[str]:
    if isinstance(value, dict):
        return [f for v in value.values() for f in _value_forms(v)]
    if not isinstance(value, str) or not value:
        return []
    forms = {value, comment(value), python_literal(value)}
    return sorted(forms, key=len, reverse=True)


# --- the tests -------------------------------------------------------------------------

def test_chinese_code_compiles():
    for key, _, zh, _ in _pairs():
        try:
            compile(zh, key, "exec")
            compile(zh.encode("utf-8"), key, "exec")     # as a file: no encoding cookie
        except SyntaxError as exc:
            pytest.fail(f"{key}: {exc}\n{zh}")


def test_languages_differ_only_in_comments():
    compared = 0
    for key, en, zh, _ in _pairs():
        assert _without_comments(zh) == _without_comments(en), key
        compared += en != zh
    assert compared > 1000          # most renders do carry translated comments


def test_no_english_prose_in_chinese_comments():
    leaks = {}
    for key, _, zh, values in _pairs():
        for token in _comments(zh):
            found = english_prose(token.string, values)
            if found:
                leaks.setdefault(token.string, (key, found))
    assert not leaks, "\n".join(f"{line}\n    {key}: {found}" for line, (key, found) in leaks.items())


def test_the_prose_check_sees_english_and_lets_code_be():
    # every English render holds prose the check finds
    for key, en, _, values in _pairs():
        assert any(english_prose(t.string, values) for t in _comments(en)), key
    assert english_prose("# ranges are inclusive") == ["ranges are inclusive"]
    assert english_prose("# needs a bad case source first") == ["bad case source"]
    assert english_prose("# not exposed by this version")
    assert english_prose("# 现有的 QAT checkpoint") == []
    assert english_prose("# 写入 ./qa export/it's/all_badcase_info.pt") == []
    assert english_prose('# 仍不一致 -> qat.export.pt vs qat.bc（QuantAnalysis "export"）') == []
    for code in ("#   FixedScaleObserver(scale=threshold / 128, zero_point=0, dtype=qint8)",
                 "#   from horizon_plugin_pytorch.quantization.observer_v2 import FixedScaleObserver",
                 '    # "head.decoder.rsqrt", "backbone.attn.exp"',
                 "# -> ./qa_convert/compare_per_layer_out.{txt,csv}"):
        assert english_prose(code.strip()) == [], code


def _messages() -> dict[str, str]:
    """Key -> the message as marked, of every {% trans %} in every snippet template."""
    env = _environment()
    folder = resources.files("qcdoctor.templates") / "snippets"
    found = {}
    for path in sorted(p.name for p in folder.iterdir() if p.name.endswith(".py.j2")):
        for _, function, message in env.extract_translations(_load(f"snippets/{path}")):
            assert function == "gettext", (path, function, message)   # {% trans %} only
            message = message[0] if isinstance(message, tuple) else message
            found[message_key(message)] = message
    return found


def test_the_catalogue_holds_exactly_the_marked_messages():
    messages, zh = _messages(), catalogue("zh")
    assert len(messages) > 60
    assert sorted(set(messages) - set(zh)) == [], "not translated"
    assert sorted(set(zh) - set(messages)) == [], "translated but used by no template"


_PLACEHOLDER = re.compile(r"%\((\w+)\)s")
# names the Chinese keeps as written: dotted or underscored names, names with digits,
# CamelCase, numbers, backticked and quoted spans
_KEPT = re.compile(r"`[^`]*`|\"[^\"]*\"|\b\w+(?:\.\w+)*\.\w{2,}(?:\(\))?|\b\w*_\w*(?:\(\))?(?:=\w+)?"
                   r"|\b[A-Za-z]+\d\w*|\b\d+(?:\.\d+)*\b|\b[A-Z][a-z]+[A-Z]\w*")
_HAN = re.compile(r"[\u4e00-\u9fff]")


@pytest.mark.parametrize("key", sorted(catalogue("zh")))
def test_each_translation_keeps_the_code_and_stays_a_comment(key):
    text, message = catalogue("zh")[key], _messages().get(key, key)
    assert _HAN.search(text), "not Chinese"
    assert sorted(_PLACEHOLDER.findall(text)) == sorted(_PLACEHOLDER.findall(key))
    assert "%" not in _PLACEHOLDER.sub("", text).replace("%%", ""), "a lone % breaks formatting"
    missing = [name for name in _KEPT.findall(key) if name not in text]
    assert not missing, f"names to keep as written: {missing}"
    for line in text.split("\n"):
        assert line and line == line.strip() and comment(line) == line, repr(line)
    # more lines only where the English goes on over lines (a trailing comment cannot)
    assert "\n" not in text or message != key
    assert english_prose(_PLACEHOLDER.sub("x_y", text).replace("\n", " ")) == []


def test_a_missing_or_broken_translation_falls_back_to_english():
    message = "level %(level)s requires retraining after it is set"
    assert translator({})(message, level=1) == "level 1 requires retraining after it is set"
    broken = translator({message: "level %(lvl)s 需要重训"})
    assert broken(message, level=1) == "level 1 requires retraining after it is set"
    assert translator({message: "level %(level)s 需要重训"})(message, level=1) == "level 1 需要重训"
    assert catalogue("fr") == {} and catalogue("en") == {}


def test_translated_text_takes_the_comment_safety_path():
    gettext = translator({"a b": "第一行\n第二行 coding: utf-7\u2028x", "v %(v)s": "值 %(v)s"})
    text = gettext("a\n#    b")
    assert text.split("\n") == ["第一行", "#    第二行 coding : utf-7\\u2028x"]
    value = "x\n# coding: utf-7\rimport os"
    assert "\n" not in gettext("v %(v)s", v=value) and "\r" not in gettext("v %(v)s", v=value)
    assert "coding:" not in gettext("v %(v)s", v=comment(value))
    # a value completing a cookie with the text before it
    assert "coding:" not in translator({"c %(v)s": "coding%(v)s"})("c %(v)s", v=comment(":x"))


def test_board_is_named_in_the_report_language():
    action = {"stage_to_evaluate": "board"}
    assert "板端" in render_snippet("evaluate_stage", action, {}, lang="zh")
    assert "board" in render_snippet("evaluate_stage", action, {}, lang="en")


# --- the English code is what it was ---------------------------------------------------

# sha256 of each snippet's English renders (every variant and context above, no rules).
# After an intended change of the English code, print _english_digests() and paste it.
ENGLISH_DIGESTS = {
    "bc_editor": "ea858ed165feda395efabc0e64a3314153cb8e64cc7a48d6dac1c9ad194d666c",
    "consistency_level": "ee04a51691a8e906199c7c75eb6c59fe763156c588dbfce168da6d43f4705861",
    "convert_analysis": "92ffbf8a6efc93a8b5a697b6f8dba11c1ea18014cfcf1573069d7e992ff8fbbf",
    "convert_sensitivity": "dba4cd08b87f0fe7fb536e90159dbe6993812fbaab82235b647d584c793caebf",
    "convert_sensitivity_pending":
        "53784a5b370f81ff56a5755f0d085c6f2ab0f0506d50fc78ddb4e4d2f8b8b54d",
    "evaluate_stage": "80c2bde240f87666a8597b754192476366651c2b01d63752c4b5bb56d27ecada",
    "export_state_check": "d543e622dad026ff0b5ac37c7af03e71f4a150a9932c5bba2420564bb8e163fc",
    "fixed_scale": "de87902c6e06fdc4b56f079013612f2035b3fd183fb29e8688b33afc89a54991",
    "lut_bisect": "32794c021088bf76ef860aa4aa44bf18f96c9d548099c53a53de2d2c17cafe8a",
    "measured_fix": "c414d449d17a7f59833034f6dd9a849d125ed9de65c0e738aaff20417edc9720",
    "own_module": "1bc005ac0c5d83e8eba2310f93dad86408e0913c7db8c08fe21142ae8c55ee9b",
    "probe_fix_trials": "478091988923fdeabc54f2177b5507a698d0cd9b8067d4eaa3abf8e2b90fac19",
    "probe_sensitivity_pending":
        "da8990e134c4ca4f41cc9d24cc8c62af27891a9a7fd2149c307147a004aafc7d",
    "qdq_compare": "591f42a9e8e5c29861aad77b65c8cc392b1cbfc110798a0ded9a4eeaf1575b8f",
    "qint16": "f5eb73625969d882482f8e2119c3a3c7d6c0680b2334f25d30596c9ef2fb490f",
    "quant_analysis": "34fdecd8196201f57d4926b9598dbd90a1f99b76cf94d76437e27e5cafb9fdc1",
    "sensitivity_pending": "a4ef95c328038e6b77fe020e0584b01e1e160d98a39b3ad9a78351343ae74671",
    "user_side_checks": "44845b5c9ed8d4ae29fdeb8a17c16ba8aa9db49f3e61129d3137dc06d09ba863",
}


def _english_digests() -> dict[str, str]:
    digests: dict[str, hashlib._Hash] = {}
    contexts = _contexts()
    for name, action in _variants():
        for context in contexts:
            code = render_snippet(name, {"id": name, **action}, context, lang="en")
            digests.setdefault(name, hashlib.sha256()).update(code.encode("utf-8") + b"\0")
    return {name: h.hexdigest() for name, h in sorted(digests.items())}


def test_english_code_is_unchanged():
    assert _english_digests() == ENGLISH_DIGESTS


_RENDER_BOTH = ("import sys\nfrom qcdoctor.engine.diagnosis.snippets import render_snippet\n"
                "action = {'analysis_model_type': 'convert', 'baseline': 'qat_bc',"
                " 'analysis': 'quantized_bc'}\n"
                "for lang in sys.argv[1:]:\n"
                "    sys.stdout.write(render_snippet('quant_analysis', action,"
                " {'badcase': 'none'}, lang=lang) + '\\f')\n")


def test_languages_share_compiled_templates_and_never_mix(tmp_path):
    """One compiled template (memory and on-disk cache) serves both languages."""
    env = dict(os.environ, QCDOCTOR_CACHE_DIR=str(tmp_path))

    def run(*langs):
        done = subprocess.run([sys.executable, "-c", _RENDER_BOTH, *langs], env=env,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout.split("\f")[:-1]

    zh, en = run("zh", "en")                        # compiles and stores
    assert run("en", "zh", "en") == [en, zh, en]    # from the cache, in any order
    assert "基准模型" in zh and "基准模型" not in en and "(baseline)" in en
    assert _without_comments(zh) == _without_comments(en)
