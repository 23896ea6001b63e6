"""Case files are composed over libyaml where PyYAML has it (our composer over its parser,
or its own composer with the limits checked afterwards): the nodes, values, line numbers
and errors must be exactly those of the pure-Python reference loader."""

from __future__ import annotations

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from qcdoctor.collectors import yaml_schema
from qcdoctor.collectors.yaml_schema import BoundedLoader, load_plain
from qcdoctor.engine.commands.examples import example_names, example_path
from qcdoctor.errors import QcdoctorError

pytestmark = pytest.mark.skipif(yaml_schema._FAST_LOADER is None,
                                reason="PyYAML without libyaml has only the reference loader")


def _nodes(loader_class, text):
    loader = loader_class(text)
    try:
        return _shape(loader.get_single_node())
    finally:
        loader.dispose()


def _shape(node):
    """Everything the schema reader looks at: tag, value, style and position of each node."""
    if node is None:
        return None
    where = (node.tag, node.start_mark.line, node.start_mark.column)
    if isinstance(node, yaml.ScalarNode):
        return where + (node.value, node.style or None)   # plain: None here, "" in libyaml
    if isinstance(node, yaml.SequenceNode):
        return where + ([_shape(item) for item in node.value],)
    return where + ([(_shape(k), _shape(v)) for k, v in node.value],)


def _outcome(loader_class, text):
    try:
        return ("ok", _nodes(loader_class, text))
    except Exception as exc:  # noqa: BLE001 - the kind of failure is what is compared
        return ("error", type(exc).__name__)


_FAST_LOADERS = pytest.mark.parametrize("fast", ["_FAST_LOADER", "_C_COMPOSED"])


@_FAST_LOADERS
@pytest.mark.parametrize("name", example_names())
def test_bundled_case_files_compose_identically(name, fast):
    with example_path(name) as path:
        text = (path / "case.yaml").read_text(encoding="utf-8")
    assert _nodes(getattr(yaml_schema, fast), text) == _nodes(BoundedLoader, text)


def test_case_files_without_aliases_are_composed_by_libyaml(monkeypatch):
    class Unused:
        def __init__(self, text):
            raise AssertionError("composed in Python")
    monkeypatch.setattr(yaml_schema, "_FAST_LOADER", Unused)
    monkeypatch.setattr(yaml_schema, "BoundedLoader", Unused)
    for name in example_names():
        with example_path(name) as path:
            assert load_plain((path / "case.yaml").read_text(encoding="utf-8"), "case.yaml")


_PIECES = st.sampled_from(["a", "b: 1", "- x", "  ", "\n", ": ", "- ", "#c", "'q'", '"d"',
                           "&a ", "*a", "!!str ", "? ", "{", "}", "[", "]", ",", "|", ">",
                           "\t", "|#c", ">-1#", "1e-5", "4.10", "yes", "~", "é", "漢字", "\\ud800", '"\\ud800"',
                           "\x07", "\ufeff", "%YAML 1.1\n---\n", "---", "...", "key:", "@"])


@settings(max_examples=400, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_PIECES, max_size=30).map("".join))
def test_any_text_gets_the_reference_outcome(text):
    """Whatever a fast path reads must be read identically by the reference loader; what
    it refuses or declines goes to the reference loader, so that needs no comparison.
    libyaml's own composer is given only texts without anchors and aliases."""
    if yaml_schema._DIFFERENT_IN_LIBYAML.search(text):
        return
    fast = [_outcome(yaml_schema._FAST_LOADER, text)]
    if "&" not in text and "*" not in text:
        fast.append(_outcome(yaml_schema._C_COMPOSED, text))
    for outcome in fast:
        if outcome[0] == "ok":
            assert outcome == _outcome(BoundedLoader, text)


@pytest.mark.parametrize("text", ["a: [1, 2\n", "a: b: c\n", "a:\n\t- 1\n", 'a: "\\ud800"\n',
                                  "a: \x07\n", "[" * 40 + "]" * 40, "- &x [1]\n- *y\n",
                                  "a:\n" + "".join(f"  - {i}\n" for i in range(1001)),
                                  "a: " + "x" * 10_001 + "\n", "a: [" + "1," * 100_001 + "1]\n",
                                  "a:\n" + "".join("  " * i + f"k{i}:\n" for i in range(1, 40)),
                                  "- " * 1200 + "x\n"])
def test_errors_are_worded_by_the_reference_loader(monkeypatch, text):
    with pytest.raises(QcdoctorError) as fast:
        load_plain(text, "case.yaml")
    monkeypatch.setattr(yaml_schema, "_FAST_LOADER", None)
    with pytest.raises(QcdoctorError) as reference:
        load_plain(text, "case.yaml")
    assert fast.value.render() == reference.value.render()


@pytest.mark.parametrize("text", [
    "[" * 33 + "]" * 33,                                           # nested too deep
    "a: [" + "1," * 1000 + "1]\n",                                 # a list too long
    "[" + ", ".join("[" + "1," * 998 + "1]" for _ in range(101)) + "]\n",   # too many values
    "a: " + "x" * 10_001 + "\n",                                   # a value too long
    "a:\nb: 1\n",                                                  # an empty plain value
])
def test_libyaml_composed_documents_past_a_limit_are_declined(text):
    """Each limit is checked on libyaml's own nodes, for documents it is given (no anchor,
    within the nesting bound), so the reference loader words what is refused. (An escaped
    lone surrogate never gets this far: libyaml's scanner refuses it.)"""
    assert "&" not in text and "*" not in text
    assert yaml_schema._nesting_bound(text) <= yaml_schema._C_COMPOSER_DEPTH
    loader = yaml_schema._C_COMPOSED(text)
    try:
        with pytest.raises(yaml_schema._Declined):
            loader.get_single_node()
    finally:
        loader.dispose()
