"""fx_graph.txt, layer_calls.csv and layer_own_error.csv are held as one object per line:
their memory is bounded by a small multiple of their size whatever their shape (long
chains, long dotted targets, wide fan-in), and their size is capped (64 MiB), so one file
never costs gigabytes; a larger one is refused naming the cap."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import pytest

from qcdoctor.collectors.files import SIZE_CAPS, MiB
from qcdoctor.collectors.reading.fx_graph import load_graph
from qcdoctor.collectors.reading.own_error import load_own_error
from qcdoctor.engine.diagnosis.triage import triage_path
from tests.qa.writers import layer, write_compare

# bytes of memory per byte of file, at most: the cap times this stays under 1.5 GiB
PER_BYTE = 20


def _graph_text(rows: list[tuple[str, ...]]) -> str:
    header = ("opcode", "name", "target", "args", "kwargs", "mod_name")
    widths = [max(len(h), *(len(r[k]) for r in rows)) for k, h in enumerate(header)]
    line = "  ".join(f"{{:<{w}}}" for w in widths).format
    return "\n".join(["Graph:", line(*header).rstrip(), "  ".join("-" * w for w in widths),
                      *(line(*r).rstrip() for r in rows)]) + "\n"


def _chain(nodes: int, depth: int = 3) -> str:
    rows = [("placeholder", "x", "x", "()", "{}", "")]
    for i in range(nodes):
        target = ".".join(f"level{k}" for k in range(depth)) + f".conv{i}"
        rows.append(("call_module", f"conv_{i}", target, f"({rows[-1][1]},)", "{}", target))
    return _graph_text(rows)


def _fan_in(readers: int, width: int) -> str:
    rows = [("placeholder", "x", "x", "()", "{}", "")]
    branches = [f"b{i}" for i in range(width)]
    rows += [("call_module", b, f"branch.{b}", "(x,)", "{}", f"branch.{b}") for b in branches]
    for r in range(readers):
        rows.append(("call_function", f"cat_{r}", "torch.cat", f"([{', '.join(branches)}],)",
                     "{'dim': 1}", f"cat{r}"))
    return _graph_text(rows)


def _peak(load, path: Path) -> int:
    tracemalloc.start()
    try:
        load(path)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("text", [_chain(20_000), _chain(2_000, depth=200),
                                  _fan_in(60, 600)],
                         ids=["chain", "long_dotted_targets", "wide_fan_in"])
def test_a_graph_costs_a_small_multiple_of_its_size(tmp_path, text):
    path = tmp_path / "fx_graph.txt"
    path.write_text(text, encoding="utf-8")
    size = path.stat().st_size
    assert _peak(load_graph, path) < PER_BYTE * size + (4 << 20), size


def test_an_own_error_file_costs_a_small_multiple_of_its_size(tmp_path):
    path = tmp_path / "layer_own_error.csv"
    lines = ["mod_name,own_cosine,own_atol,own_qsteps,weight_sqnr_db,weight_scheme,"
             "weight_channel_ratio,own_status"]
    lines += [f"backbone.stage{i % 7}.block{i}.conv,0.99991,0.0123,1.5,35.2,per_channel,3.1,"
              "measured" for i in range(40_000)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert _peak(load_own_error, path) < PER_BYTE * path.stat().st_size + (4 << 20)


def test_the_cap_bounds_a_graph_file_to_under_two_gigabytes():
    assert SIZE_CAPS["graph"] * PER_BYTE < 2048 * MiB


def test_a_graph_past_its_cap_is_refused_naming_it(tmp_path, monkeypatch):
    monkeypatch.setitem(SIZE_CAPS, "graph", 1 * MiB)        # the same rule, a smaller file
    case = tmp_path / "case"
    write_compare(case / "qa_convert", [layer("conv_1", 0.999), layer("conv_2", 0.5)])
    (case / "qa_convert" / "fx_graph.txt").write_text(_chain(12_000), encoding="utf-8")
    assert (case / "qa_convert" / "fx_graph.txt").stat().st_size > MiB
    (case / "case.yaml").write_text("symptom: x\nplatform: {chip: J6E}\n", encoding="utf-8")
    report = triage_path(case, use_env=False, lang="en")
    problems = [f["problem"] for f in report["facts"] if f["type"] == "artifact_problem"]
    assert any("1 MiB" in p and "graph" in p for p in problems), problems


def test_one_short_row_leaves_the_rest_of_the_graph_read_and_is_said(tmp_path):
    case = tmp_path / "case"
    write_compare(case / "qa_convert", [layer("conv1", 0.9999), layer("conv2", 0.5),
                                        layer("conv3", 0.49)])
    text = _graph_text([("placeholder", "x", "x", "()", "{}", ""),
                        ("call_module", "conv1", "conv1", "(x,)", "{}", ""),
                        ("call_module", "conv2", "conv2", "(conv1,)", "{}", ""),
                        ("call_module", "conv3", "conv3", "(conv2,)", "{}", "")])
    lines = text.splitlines()
    lines.insert(5, "call_module  cut")                    # a row cut short
    (case / "fx_graph.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (case / "case.yaml").write_text("symptom: x\nplatform: {chip: J6E}\n", encoding="utf-8")
    report = triage_path(case, use_env=False, lang="en")
    problems = [f for f in report["facts"] if f["type"] == "artifact_problem"]
    assert any("without their args cell" in p["problem"] and "line(s) 6" in p["problem"]
               and p["partial"] for p in problems), problems
    loaded = [f for f in report["facts"] if f["type"] == "graph_loaded"]
    assert loaded and loaded[0]["nodes"] == 4
    origin = next(f for f in report["facts"] if f["type"] == "layer_origin")
    assert origin["layer"] == "conv2" and origin["reading"] == "graph"
