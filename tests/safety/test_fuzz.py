"""Fuzzing: mutated case files, damaged artefacts and compile scripts, each through the
CLI's own entry point. Every input ends in exit 0, or exit 2 with a message naming the
file, within a time bound; never an internal error, a traceback or a hang.

CI runs a fixed seed (derandomize) and a bounded number of examples per test. A longer
campaign: ``QCDOCTOR_FUZZ_EXAMPLES=2000 python -m pytest tests/safety/test_fuzz.py`` (fresh
randomness, that many examples per test; engine failures are written to
``QCDOCTOR_FUZZ_LOG`` when it is set).
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
import time
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, currently_in_test_context, event, given, settings
from hypothesis import strategies as st

from qcdoctor.engine.commands.cli import main
from tests.deploy.scripts import EXAMPLE as EXAMPLE_SCRIPT
from tests.paths import REPO
from tests.qa.writers import (
    COMPARE_FORMATS,
    _psql,
    layer,
    write_advisor,
    write_badcase,
    write_compare,
    write_fx_graph,
    write_model_check,
    write_sensitivity,
)

CAMPAIGN = int(os.environ.get("QCDOCTOR_FUZZ_EXAMPLES", "0"))
SECONDS_PER_INPUT = 20
# messages of durable_rules' own failures on some fact strings: the engine's to fix
ENGINE_MESSAGES = ("pyRetractFact", "pyAssertFact", "Could not retract fact",
                   "Could not assert fact", "Could not post")
ENGINE_FAILURES: list[dict] = []


@pytest.fixture(scope="module", autouse=True)
def no_engine_failures():
    """After this file's tests, in whatever order they ran: no input may fail inside the
    engine (facts are bounded before it, and it runs in a replaceable worker)."""
    yield
    assert not ENGINE_FAILURES, json.dumps(ENGINE_FAILURES[:20], indent=1)


def fuzz(ci_examples: int):
    return settings(max_examples=CAMPAIGN or ci_examples, derandomize=not CAMPAIGN,
                    deadline=None, database=None, print_blob=True,
                    suppress_health_check=list(HealthCheck))


class _Outcome:
    def __init__(self, code: int, out: bytes, err: str, seconds: float):
        self.code, self.out, self.err, self.seconds = code, out, err, seconds


def _run(*args: str) -> _Outcome:
    out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")     # strict, like a real stdout
    err = io.StringIO()
    start = time.perf_counter()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(list(args))
    out.flush()
    return _Outcome(code, out.buffer.getvalue(), err.getvalue(), time.perf_counter() - start)


def triage_survives(case: Path, named: str, what: str) -> dict | None:
    """triage --format json on ``case``: the report, or None after a clean exit 2."""
    result = _run("triage", str(case), "--format", "json")
    engine = ("internal error" in result.err and any(m in result.err for m in ENGINE_MESSAGES)) \
        or "the rule engine failed on this case" in result.err       # the worker's exit 2
    if engine:
        _record_engine_failure(case, what, result.err)
        return None
    assert "internal error" not in result.err and "Traceback" not in result.err, result.err
    assert result.seconds < SECONDS_PER_INPUT, f"{result.seconds:.1f} s for one input"
    assert result.code in (0, 2), (result.code, result.err)
    if currently_in_test_context():                # --hypothesis-show-statistics counts them
        event(f"{what}: exit {result.code}")
    if result.code == 2:
        assert named in result.err and "qcdoctor: error:" in result.err, result.err
        return None
    return json.loads(result.out)


def _record_engine_failure(case: Path, what: str, message: str) -> None:
    entry = {"what": what, "message": message.splitlines()[0][:200], "case": str(case)}
    ENGINE_FAILURES.append(entry)
    log = os.environ.get("QCDOCTOR_FUZZ_LOG")
    if log:
        keep = Path(log).with_suffix("") / f"engine_{len(ENGINE_FAILURES)}"
        shutil.copytree(case, keep, dirs_exist_ok=True)
        with open(log, "a", encoding="utf-8") as handle:
            handle.write(json.dumps({**entry, "kept": str(keep)}) + "\n")


# --- text mutations ---------------------------------------------------------------------

ODD_VALUES = ["", "~", "[]", "{}", "[1, [2, [3]]]", "1e999", ".nan", "-.inf", "'1.0000000'",
              "0x1F", "yes", "null", '"\\ud800"', "&a [1, 2]", "*a", "*undefined",
              "!!python/object/apply:os.system ['echo pwned']", "!!binary AAAA", "x" * 20_000,
              "[" * 300, "2001-12-14", "\n  - a\n  - b", "|\n  block\n  text", '"\\0\\x07"',
              "'\t'", "99999999999999999999999", "-1", "3.5", '"ü中文 <b>&amp;"', "@x", "%TAG",
              "? complex", "{a: *a}", "[" + ", ".join(["1"] * 1200) + "]", "- - - -",
              "'" + "é" * 9_000 + "'", "<script>alert(1)</script>", "NaN", "inf", "J6E",
              "qat_bc", "nash-e", "convert", "0", "1.0000000", "None", "*", ",", "|"]
# values that are valid somewhere in a case file: the mutated file often still loads and
# reaches the collectors and the rules
PLAUSIBLE = ["yes", "no", "unknown", "true", "false", "J6E", "J6M", "J6P", "nash-e", "nash-p",
             "qat_bc", "quantized_bc", "hbm_x86", "board", "convert", "export", "normal",
             "abnormal", "rgb", "nv12", "NCHW", "NHWC", "pyramid", "[]", "{}", "0", "1", "2", "0.5",
             "1e-300", "1e300", "-0.0", "0.0000001", "100", "''", '"ü中文 <b>&amp;"',
             "'" + "長" * 9_000 + "'", "dataset_eval", "single_frame", "[0, 1, 2]",
             "{abs: 0}", "{rel: 1e-9}", "qa_convert", "deploy/compile_model.py", "../outside",
             "/etc/passwd", "{status: abnormal}", "{metric: " + "m" * 9_000 + ", value: 0.1}"]
NOISE = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=12) | \
    st.sampled_from(["\x00", "\ufeff", "\r\n", "\t", ": ", "- ", "#", "&", "*", "!", "'", '"',
                     "{", "}", "[", "]", "|", ">", "%", "@", "`", "\u2028", "\x85"])


@st.composite
def _mutation(draw, text: str) -> str:
    lines = text.splitlines(keepends=True) or [""]
    op = draw(st.sampled_from(["delete", "insert", "dup_line", "swap_lines", "value", "value",
                               "value", "indent", "truncate", "drop_line", "number", "number"]))
    at = draw(st.integers(0, max(len(text) - 1, 0)))
    i = draw(st.integers(0, len(lines) - 1))
    if op == "delete":
        return text[:at] + text[at + draw(st.integers(1, 40)):]
    if op == "insert":
        return text[:at] + draw(NOISE) + text[at:]
    if op == "dup_line":
        return "".join(lines[:i + 1] + lines[i:])
    if op == "swap_lines":
        j = draw(st.integers(0, len(lines) - 1))
        lines[i], lines[j] = lines[j], lines[i]
        return "".join(lines)
    if op == "indent":
        lines[i] = draw(st.sampled_from(["", " ", "    ", "\t"])) + lines[i].lstrip(" ")
        return "".join(lines)
    if op == "truncate":
        return text[:at]
    if op == "drop_line":
        return "".join(lines[:i] + lines[i + 1:])
    if op == "number":                  # a number becomes something else
        numbers = list(re.finditer(r"-?\d+(\.\d+)?(e-?\d+)?", text))
        if not numbers:
            return text
        m = numbers[draw(st.integers(0, len(numbers) - 1))]
        return text[:m.start()] + draw(st.sampled_from(ODD_VALUES + PLAUSIBLE)) + text[m.end():]
    # op == "value": the value after a key (or a list item) becomes an odd one
    spots = list(re.finditer(r"(?<=: )[^\n,}]*|(?<=- )[^\n]*", text))
    if not spots:
        return text
    m = spots[draw(st.integers(0, len(spots) - 1))]
    values = draw(st.sampled_from([ODD_VALUES, PLAUSIBLE, PLAUSIBLE]))
    return text[:m.start()] + draw(st.sampled_from(values)) + text[m.end():]


def mutated(text: str, most: int = 4):
    """``text`` after one to ``most`` mutations, each applied to the result of the last."""
    def chain(n: int):
        strategy = st.just(text)
        for _ in range(n):
            strategy = strategy.flatmap(_mutation)
        return strategy
    return st.integers(1, most).flatmap(chain)


# --- case files -------------------------------------------------------------------------

EXAMPLES = sorted(p.parent for p in (REPO / "examples").glob("*/case.yaml"))


@fuzz(ci_examples=120)
@given(data=st.data(), example=st.sampled_from(EXAMPLES), raw=st.integers(0, 5).map(lambda n: n == 0))
def test_mutated_case_files(tmp_path_factory, data, example, raw):
    case = tmp_path_factory.mktemp("case")
    shutil.copytree(example, case, dirs_exist_ok=True)
    text = data.draw(mutated((example / "case.yaml").read_text(encoding="utf-8"), 2))
    encoded = text.encode("utf-8", "surrogatepass")
    if raw:                              # bytes that are not UTF-8
        at = data.draw(st.integers(0, len(encoded)))
        encoded = encoded[:at] + data.draw(st.sampled_from([b"\xff", b"\xc3", b"\xed\xa0\x80"])) \
            + encoded[at:]
    (case / "case.yaml").write_bytes(encoded)
    report = triage_survives(case, str(case / "case.yaml"), "case.yaml")
    if report is not None:
        assert report["conclusion"]["stage"]


# --- artefacts --------------------------------------------------------------------------

CASE = {
    "schema": "qcdoctor/case-v1", "language": "en", "evidence": ["dataset_eval"],
    "badcase": "available", "platform": {"chip": "J6E"},
    "stages": {"qat_bc": {"metric": "mAP", "value": 0.449},
               "quantized_bc": {"metric": "mAP", "value": 0.391}},
    "analyses_run": [{"type": "convert", "baseline": "qat_bc", "analysis": "quantized_bc",
                      "out_dir": "qa_convert", "sensitivity": True}],
    "artifacts": {"quant_analysis": ["qa_convert"], "fx_graph": "fx_graph.txt",
                  "model_check_result": "model_check_result.txt"},
    "deploy": {"train": {"color": "rgb", "layout": "NCHW", "mean": [123.675, 116.28, 103.53],
                         "std": [58.395, 57.12, 57.375]},
               "board": {"color": "nv12", "height": 544, "width": 960,
                         "input_source": "pyramid"},
               "script": "deploy/compile_model.py", "config": "deploy/hb_compile.yaml"},
}
NAMES = ["quant", "backbone.conv0", "backbone.conv1", "neck.fuse.relu", "head.reciprocal",
         "head.cls.0", "dequant"]


def write_artefact_case(folder: Path, layout: str, fmt: str) -> dict[str, Path]:
    """A case folder holding one of every artefact kind; returns kind -> path."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "case.yaml").write_text(yaml.safe_dump(CASE), encoding="utf-8")
    qa = folder / "qa_convert"
    rows = [layer(n, 0.99995 - i * 1e-6 if i < 3 else 0.81 - i * 0.01) for i, n in enumerate(NAMES)]
    rows.insert(3, layer("neck.fuse.conv", None))
    files = {"compare": write_compare(qa, rows, layout, fmt)}
    files["sensitivity"] = write_sensitivity(qa, [
        ("neck.fuse.relu", "weight", "horizon_plugin_pytorch.nn.qat.conv2d.Conv2d", 0.42, "qint8"),
        ("head.cls.0", "activation", "torch.nn.Conv2d", 0.05, "qint8"),
        ("backbone.conv1", "activation", "torch.nn.Conv2d", 0.01, "qint8"),
        ("head.reciprocal", "activation", "horizon_plugin_pytorch.nn.qat.segment_lut.SegmentLUT",
         0.004, "qint16"),
        ("quant", "activation", "QuantStub", 0.0, "qint8")])
    files["advisor"] = write_advisor(qa, [("head.reciprocal", "Reciprocal",
                                           "Total data range 130925.09 maybe too large for "
                                           "quantization.", "limit the data range")])
    files["badcase"] = write_badcase(qa, {"L1": {"pred_boxes": 3, "pred_logits": 17},
                                          "Cosine": {"pred_boxes": 3, "pred_logits": 3}})
    statistic = qa / "analysis_model" / "statistic.txt"
    statistic.parent.mkdir()
    statistic.write_text(_psql(["Index", "Op Name", "Mod Name", "Attr", "Dtype", "Scale", "Min",
                                "Max"],
                               [["3", "horizon_plugin_pytorch.nn.qat.conv2d.Conv2d",
                                 "neck.fuse.relu", "weight", "qint8", "0.0078409", "-0.9957892",
                                 "0.9957892"],
                                ["3", "horizon_plugin_pytorch.nn.qat.conv2d.Conv2d",
                                 "neck.fuse.relu", "output", "qint8", "0.0169127", "-2.16",
                                 "2.14"]], index=False), encoding="utf-8")
    files["statistic"] = statistic
    files["model_check"] = write_model_check(folder / "model_check_result.txt",
                                             unfused=["backbone.conv0"],
                                             called=[("neck.fuse.relu", 2), ("head.cls.0", 0)],
                                             dequant_qint8=["dequant"],
                                             averaging=[("backbone.conv1", 0.0)])
    nodes = [("placeholder", "input_0", "input_0", "()")]
    for name in NAMES:
        nodes.append(("call_module", name.replace(".", "_"), name, f"({nodes[-1][1]},)"))
    nodes.append(("call_function", "is_export_mode", "<function is_export at 0x7f>", "()"))
    nodes.append(("output", "output", "output", f"(({nodes[-2][1]},),)"))
    files["fx_graph"] = write_fx_graph(folder / "fx_graph.txt", nodes)
    deploy = folder / "deploy"
    deploy.mkdir()
    files["script"] = deploy / "compile_model.py"
    files["script"].write_text(EXAMPLE_SCRIPT, encoding="utf-8")
    files["hb_compile"] = deploy / "hb_compile.yaml"
    files["hb_compile"].write_text(yaml.safe_dump({
        "model_parameters": {"march": "nash-e"},
        "input_parameters": {"input_type_train": "rgb", "input_type_rt": "nv12",
                             "input_layout_train": "NCHW", "input_source": "pyramid",
                             "mean_value": "123.675 116.28 103.53"},
        "compiler_parameters": {"core_num": 1}}), encoding="utf-8")
    board = folder / ".drobotics-s" / ".env.board"
    board.parent.mkdir()
    board.write_text("# board\nBOARD_IP=<ip>\nBOARD_TYPE=nash-e/m\nBPU_ARCH=nash-e\n",
                     encoding="utf-8")
    files["env_board"] = board
    return files


KINDS = ("compare", "sensitivity", "advisor", "badcase", "statistic", "model_check", "fx_graph",
         "script", "hb_compile", "env_board")
CELL_VALUES = ["", "nan", "NaN", "inf", "-inf", "None", "1.0000000", "abc", "1e400", "-0",
               "1.5", "conv", "99999999999999999999", "torch.Size([1* 2])", "*", "|", ",",
               "\x00", "中文", "x" * 3000, "-1", "0"]


@st.composite
def _damaged(draw, text: str) -> bytes:
    how = draw(st.sampled_from(["mutate", "cell", "shift", "empty", "binary", "header_only",
                                "crlf", "bom", "long_line", "many_lines", "truncate_bytes"]))
    lines = text.splitlines()
    i = draw(st.integers(0, max(len(lines) - 1, 0)))
    if how == "mutate":
        return draw(mutated(text, 3)).encode("utf-8", "surrogatepass")
    if how == "cell" and lines:       # one cell becomes text, NaN, a huge number, ...
        parts = re.split(r"(\s*\|\s*|,\s*|\s{2,})", lines[i])
        cells = [k for k in range(0, len(parts), 2)]
        k = draw(st.sampled_from(cells))
        parts[k] = draw(st.sampled_from(CELL_VALUES))
        lines[i] = "".join(parts)
    elif how == "shift" and lines:    # a separator lost or doubled: the row shifts
        for sep in ("|", ", ", "  "):
            if sep in lines[i]:
                at = draw(st.integers(0, lines[i].count(sep) - 1))
                pieces = lines[i].split(sep)
                glue = draw(st.sampled_from(["", sep + sep]))
                lines[i] = sep.join(pieces[:at + 1]) + glue + sep.join(pieces[at + 1:])
                break
    elif how == "empty":
        return b""
    elif how == "binary":
        return bytes(draw(st.binary(min_size=1, max_size=200)))
    elif how == "header_only":
        lines = lines[:draw(st.integers(0, 3))]
    elif how == "crlf":
        return "\r\n".join(lines).encode("utf-8")
    elif how == "bom":
        return b"\xef\xbb\xbf" + text.encode("utf-8")
    elif how == "long_line":
        lines.insert(i, draw(st.sampled_from(CELL_VALUES)) * 20_000)
    elif how == "many_lines":
        lines[i:i] = [lines[i] if lines else "x"] * 3_000
    elif how == "truncate_bytes":
        data = text.encode("utf-8")
        return data[:draw(st.integers(0, len(data)))]
    return ("\n".join(lines) + "\n").encode("utf-8", "surrogatepass")


@fuzz(ci_examples=150)
@given(data=st.data(), kind=st.sampled_from(KINDS), layout=st.sampled_from(["16", "23", "upper"]),
       fmt=st.sampled_from(COMPARE_FORMATS))
def test_damaged_artefacts(tmp_path_factory, data, kind, layout, fmt):
    case = tmp_path_factory.mktemp("artefacts")
    files = write_artefact_case(case, layout, fmt)
    path = files[kind]
    path.write_bytes(data.draw(_damaged(path.read_text(encoding="utf-8"))))
    report = triage_survives(case, path.name, kind)
    if report is None:
        return
    assert report["conclusion"]["stage"] == "convert"         # the case itself stands
    for fact in report["facts"]:
        if fact["type"] == "artifact_problem":
            assert fact["problem"] and fact["file"] and not fact["file"].startswith("/")


def test_undamaged_artefact_case_reads_every_kind(tmp_path):
    """The fuzzer's starting point reads cleanly: damage is what it adds."""
    for fmt in COMPARE_FORMATS:
        case = tmp_path / fmt
        write_artefact_case(case, "16", fmt)
        report = triage_survives(case, "case.yaml", "clean")
        types = {f["type"] for f in report["facts"]}
        assert {"layer_origin", "sensitivity_summary", "advisor_message", "badcase_spread",
                "weight_stat", "model_check", "graph_loaded", "deploy_script", "input_types",
                "march_check"} <= types, types
        assert not [f for f in report["facts"] if f["type"] == "artifact_problem"]


# --- compile scripts --------------------------------------------------------------------

SCRIPT_PIECES = ["hbc.compile(quantized, 'x.hbm', march=MARCH, core_num=1e999)\n",
                 "MEAN = [0.0] * 10**9\n", "MEAN = []\n", "STD = [0]\n", "STD = [1e-320]\n",
                 "MEAN = ['a', 'b', 'c']\n", "STD = [1.0, 2.0]\n",
                 "node.insert_transpose(permutes=5)\n", "x = x * x\n" * 30,
                 "def f():\n    f()\nf()\n", "x = (" * 150 + "1" + ")" * 150 + "\n",
                 "hb_convert(*args, **kw)\n", "import hbdk4\nhbdk4.compiler.convert()\n",
                 "for i in range(10**9):\n    inp.insert_split(i)\n", "\x00",
                 "async def g():\n    await hbc.compile()\n", "lambda: hb_convert(1, 2)\n",
                 "MARCH = None\n", "MARCH = ['nash-e']\n", "class A:\n    MARCH = 1\n"]


@fuzz(ci_examples=80)
@given(data=st.data())
def test_mutated_compile_scripts(tmp_path_factory, data):
    case = tmp_path_factory.mktemp("script")
    files = write_artefact_case(case, "16", "txt")
    text = data.draw(mutated(EXAMPLE_SCRIPT, 3))
    lines = text.splitlines(keepends=True)
    at = data.draw(st.integers(0, len(lines)))
    piece = data.draw(st.sampled_from(SCRIPT_PIECES))
    indent = data.draw(st.sampled_from(["", "    "]))
    text = "".join(lines[:at]) + "".join(indent + p for p in piece.splitlines(True)) + \
        "".join(lines[at:])
    files["script"].write_text(text, encoding="utf-8", errors="surrogatepass")
    report = triage_survives(case, "compile_model.py", "script")
    if report is not None:
        assert report["conclusion"]["stage"] == "convert"


# --- real processes ---------------------------------------------------------------------

@pytest.mark.parametrize("damage", ["laughs", "deep", "csv_text_index", "script_nul"])
def test_cli_processes_exit_cleanly(tmp_path, damage):
    files = write_artefact_case(tmp_path, "23", "csv_index")
    named = "case.yaml"
    if damage == "laughs":
        (tmp_path / "case.yaml").write_text(
            "schema: qcdoctor/case-v1\na: &a [x, x, x, x, x, x, x, x]\n" + "".join(
                f"b{i}: &b{i} [{', '.join(['*a' if i == 0 else f'*b{i - 1}'] * 8)}]\n"
                for i in range(12)), encoding="utf-8")
    elif damage == "deep":
        (tmp_path / "case.yaml").write_text("title: " + "{a: " * 50_000, encoding="utf-8")
    elif damage == "csv_text_index":
        lines = files["compare"].read_text(encoding="utf-8").splitlines()
        lines[3] = "conv" + lines[3][1:]
        files["compare"].write_text("\n".join(lines) + "\n", encoding="utf-8")
        named = ""
    else:
        files["script"].write_text("import hbdk4\n\x00\n", encoding="utf-8")
        named = ""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "qcdoctor", "triage", str(tmp_path),
                           "--format", "json"], capture_output=True, text=True, timeout=120)
    assert time.perf_counter() - start < 60
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr, done.stderr
    if named:
        assert done.returncode == 2 and named in done.stderr, done.stderr
    else:
        assert done.returncode == 0, done.stderr
        problems = [f for f in json.loads(done.stdout)["facts"] if f["type"] == "artifact_problem"]
        assert problems and all(p["file"] for p in problems)
