"""Validate a YAML document node by node, so every error names its line and key.

PyYAML's safe loader loses line numbers and turns ``1e-5`` into text and ``4.10`` into
4.1; walking the composed node tree keeps both the position and the raw text.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import yaml

from qcdoctor.collectors import limits
from qcdoctor.collectors.versions import VERSION_RE
from qcdoctor.errors import QcdoctorError

_BOOL_TAG = "tag:yaml.org,2002:bool"
_NULL_TAG = "tag:yaml.org,2002:null"
_INT_TAG = "tag:yaml.org,2002:int"
_FLOAT_TAG = "tag:yaml.org,2002:float"
TRUE_WORDS = {"true", "yes", "on", "y"}
FALSE_WORDS = {"false", "no", "off", "n"}


# problems of one document reported together (a linter's way): beyond this many, the rest
# are counted, not listed
MAX_PROBLEMS = 20


class _Skip(Exception):
    """The value being read has a problem (recorded): the reader goes on with the next key."""


class _Ctx:
    def __init__(self, file: str):
        self.file = file
        self.lines: dict[str, int] = {}     # key path -> line, for provenance
        self.problems: list[QcdoctorError] = []

    def fail(self, node, key: str, problem: str, fix: str | None = None):
        line = node.start_mark.line + 1 if node is not None else None
        self.problems.append(QcdoctorError(problem, file=self.file, line=line, key=key or None,
                                           fix=fix))
        raise _Skip


def _is_null(node) -> bool:
    return isinstance(node, yaml.ScalarNode) and node.tag == _NULL_TAG


class Spec:
    doc = ""

    def read(self, node, key: str, ctx: _Ctx):  # pragma: no cover - interface
        raise NotImplementedError

    def _scalar(self, node, key, ctx, what):
        if not isinstance(node, yaml.ScalarNode):
            found = "list" if isinstance(node, yaml.SequenceNode) else "mapping"
            ctx.fail(node, key, f"expected {what}, found a {found}",
                     f"write a single value after '{key}:'")
        return node.value


@dataclass
class Text(Spec):
    const: str | None = None
    doc: str = "text"

    def read(self, node, key, ctx):
        value = self._scalar(node, key, ctx, "text")
        if self.const is not None and value != self.const:
            ctx.fail(node, key, f"expected {self.const!r}, found {value!r}",
                     f"write {key}: {self.const}")
        return value


@dataclass
class Choice(Spec):
    choices: tuple

    @property
    def doc(self):
        return " | ".join(self.choices)

    def read(self, node, key, ctx):
        value = self._scalar(node, key, ctx, "one of " + self.doc)
        if node.tag == _BOOL_TAG and set(self.choices) >= {"yes", "no"}:
            value = "yes" if value.lower() in TRUE_WORDS else "no"
        if value not in self.choices:
            import difflib  # only to word an error: not imported otherwise
            close = difflib.get_close_matches(value, self.choices, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            ctx.fail(node, key, f"{value!r} is not allowed", f"{hint}use one of: {self.doc}")
        return value


@dataclass
class Flag(Spec):
    doc: str = "true | false"

    def read(self, node, key, ctx):
        value = self._scalar(node, key, ctx, "true or false")
        low = value.lower()
        if low in TRUE_WORDS:
            return True
        if low in FALSE_WORDS:
            return False
        ctx.fail(node, key, f"expected true or false, found {value!r}",
                 "write true or false, or leave the key out when unknown")


def fits_float(value) -> bool:
    """Whether a number converts to a float (every value read as a number is compared
    with, or computed on as, floats: an integer of 309 digits or more is not one)."""
    try:
        float(value)
    except OverflowError:
        return False
    return True


@dataclass
class Number(Spec):
    minimum: float | None = None
    maximum: float | None = None
    integer: bool = False

    @property
    def doc(self):
        return "integer" if self.integer else "number"

    def read(self, node, key, ctx):
        raw = self._scalar(node, key, ctx, self.doc)
        if node.tag == _BOOL_TAG:
            ctx.fail(node, key, f"expected a {self.doc}, found the boolean {raw!r}",
                     "write a whole number" if self.integer else
                     "write a plain number such as 0.449")
        special = raw.strip().lower().lstrip("+-")
        if special in (".nan", ".inf"):
            ctx.fail(node, key, f"{raw!r} is not a finite number",
                     "write the measured value; leave the key out when unknown")
        try:
            value = int(raw) if self.integer else float(raw)
        except ValueError:
            ctx.fail(node, key, f"expected a {self.doc}, found {raw!r}",
                     "write a plain number such as 0.449" if not self.integer else
                     "write a whole number")
        if not fits_float(value):           # an integer of hundreds of digits
            ctx.fail(node, key, f"{raw!r} is too large a number ({len(raw.strip()):,} "
                                "characters)",
                     "write the measured value; leave the key out when unknown")
        if not math.isfinite(value):
            ctx.fail(node, key, f"{raw!r} is not a finite number",
                     "write the measured value; leave the key out when unknown")
        span = f"use a value from {self.minimum:g}" + (
            f" to {self.maximum:g}" if self.maximum is not None else " up") \
            if self.minimum is not None else None
        if self.minimum is not None and value < self.minimum:
            ctx.fail(node, key, f"{raw} is below the minimum {self.minimum:g}", span)
        if self.maximum is not None and value > self.maximum:
            ctx.fail(node, key, f"{raw} is above the maximum {self.maximum:g}", span)
        return value


@dataclass
class Version(Spec):
    doc: str = "version such as 3.1.5"

    def read(self, node, key, ctx):
        raw = self._scalar(node, key, ctx, "a version")
        if not VERSION_RE.match(raw):
            ctx.fail(node, key, f"{raw!r} is not a version", "write it as printed by pip, e.g. 4.4.1")
        return raw


@dataclass
class ListOf(Spec):
    item: Spec
    scalar_ok: bool = False     # a single scalar counts as a one-item list

    @property
    def doc(self):
        return f"list of {self.item.doc}"

    def read(self, node, key, ctx):
        if self.scalar_ok and isinstance(node, yaml.ScalarNode):
            return [self.item.read(node, key, ctx)]
        if not isinstance(node, yaml.SequenceNode):
            ctx.fail(node, key, f"expected a list ({self.doc})", f"write {key}: [ ... ]")
        items = []
        for i, child in enumerate(node.value):
            if not _is_null(child):
                try:
                    items.append(self.item.read(child, f"{key}[{i}]", ctx))
                except _Skip:               # recorded: the other items are still read
                    continue
        return items


@dataclass
class Mapping(Spec):
    fields: dict = field(default_factory=dict)
    values: Spec | None = None          # free keys, all of this spec
    one_of: bool = False                # at most one key may be given
    doc: str = "mapping"
    required: tuple = ()                # keys that must be given, not null
    elsewhere: dict = field(default_factory=dict)   # key -> where it belongs instead

    def read(self, node, key, ctx):
        if not isinstance(node, yaml.MappingNode):
            ctx.fail(node, key, "expected a mapping (key: value lines)",
                     "write it as 'name: value' lines indented under the key")
        out, seen, failed = {}, {}, set()
        for knode, vnode in node.value:
            try:
                self._read_entry(knode, vnode, key, ctx, out, seen)
            except _Skip:                   # recorded: the other keys are still read
                if isinstance(knode, yaml.ScalarNode):
                    failed.add(knode.value)
        if self.one_of and len(out) > 1:
            ctx.fail(node, key, f"give only one of {', '.join(self.fields)}",
                     f"keep one of {', '.join(out)}")
        for name in self.required:
            if name not in out and name not in failed:  # a bad value is not also missing
                ctx.fail(node, key, f"'{name}' is missing here",
                         f"give {name} under {key}" if key else f"give {name}")
        return out

    def _read_entry(self, knode, vnode, key: str, ctx: _Ctx, out: dict, seen: dict) -> None:
        name = knode.value if isinstance(knode, yaml.ScalarNode) else None
        path = f"{key}.{name}" if key else str(name)
        if name is None:
            ctx.fail(knode, key, "keys must be plain names", "write the key as plain text")
        if name in seen:
            ctx.fail(knode, path, f"given twice (first on line {seen[name]})",
                     "keep one of them; the file is not changed")
        seen[name] = ctx.lines[path] = knode.start_mark.line + 1
        spec = self.fields.get(name, self.values)
        if spec is None:
            import difflib  # only to word an error: not imported otherwise
            close = difflib.get_close_matches(name, list(self.fields), n=1)
            hint = f"did you mean '{close[0]}'? " if close else ""
            if name in self.elsewhere:
                hint = f"{name} belongs under {self.elsewhere[name]}; "
            ctx.fail(knode, path, "unknown key", f"{hint}allowed here: {', '.join(self.fields)}")
        if not _is_null(vnode):
            out[name] = spec.read(vnode, path, ctx)


class _Refused(Exception):
    """A document past one of the limits (collectors/limits.py), or holding no text."""

    def __init__(self, problem: str, mark, fix: str):
        super().__init__(problem)
        self.problem, self.mark, self.fix = problem, mark, fix


_SURROGATE = re.compile("[\ud800-\udfff]")


class _Limits:
    """Limits checked while composing, before any of them can cost.

    Nesting depth is checked before the composer recurses (no RecursionError); every
    alias counts the nodes it stands for, so a "billion laughs" file stops after
    ``YAML_NODES`` instead of expanding.
    """

    def _start_counting(self) -> None:
        self.depth = 0
        self.nodes = 0
        self.expanded: dict[int, int] = {}          # id(anchored node) -> its node count

    def compose_node(self, parent, index):
        event = self.peek_event()
        if isinstance(parent, yaml.SequenceNode) and index >= limits.LIST_ITEMS:
            raise _Refused(f"a list has more than {limits.LIST_ITEMS:,} items "
                           f"(limit: {limits.LIST_ITEMS:,} per list)", event.start_mark,
                           "keep the list short: name the few items that matter")
        if isinstance(event, yaml.AliasEvent):
            node = self.anchors.get(event.anchor)
            self._count(self.expanded.get(id(node), 1), event.start_mark)
            return super().compose_node(parent, index)
        self.depth += 1
        if self.depth > limits.YAML_DEPTH:
            raise _Refused(f"nested more than {limits.YAML_DEPTH} levels deep "
                           f"(limit: {limits.YAML_DEPTH} levels)", event.start_mark,
                           "write the values flat, as the case file format shows")
        before = self.nodes
        self._count(1, event.start_mark)
        node = super().compose_node(parent, index)
        self.depth -= 1
        if getattr(event, "anchor", None) is not None:
            self.expanded[id(node)] = self.nodes - before
        refused = _scalar_refused(node)
        if refused:
            raise _Refused(*refused)
        return node

    def _count(self, nodes: int, mark) -> None:
        self.nodes += nodes
        if self.nodes > limits.YAML_NODES:
            raise _Refused(f"more than {limits.YAML_NODES:,} values, aliases expanded "
                           f"(limit: {limits.YAML_NODES:,})", mark,
                           "write the values out once; anchors and aliases that repeat "
                           "whole lists multiply them")


def _scalar_refused(node) -> tuple[str, object, str] | None:
    """(problem, mark, fix) of a value past the limits of one value; None when within."""
    if not isinstance(node, yaml.ScalarNode):
        return None
    if len(node.value) > limits.TEXT_CHARS:
        return (f"a value of {len(node.value):,} characters "
                f"(limit: {limits.TEXT_CHARS:,} per value)", node.start_mark,
                "shorten it; attach long text as a file in the case folder")
    if _SURROGATE.search(node.value):
        return ("a value holds an escaped lone surrogate (such as \\ud800), which is not "
                "text", node.start_mark,
                "write the characters themselves, or a \\U escape of a real one")
    return None


def _placed_elsewhere(node) -> bool:
    """An empty plain value: libyaml marks it elsewhere than the reference loader does."""
    return isinstance(node, yaml.ScalarNode) and not node.value and not node.style


def _bounded_int(constructor, node):
    """An integer of at most NUMBER_DIGITS digits: past 4,300 Python's int() refuses with
    advice meant for programmers (sys.set_int_max_str_digits), and no float holds one past
    308. Plain values only (``load_plain``): a reader with its own constructor (fix_trials)
    names the key itself."""
    digits = sum(c.isdigit() for c in node.value)
    if digits > limits.NUMBER_DIGITS:
        raise _Refused(f"a number of {digits:,} digits (limit: {limits.NUMBER_DIGITS} digits)",
                       node.start_mark, "write the number the tool printed")
    return yaml.constructor.SafeConstructor.construct_yaml_int(constructor, node)


class BoundedLoader(_Limits, yaml.SafeLoader):
    """PyYAML's pure-Python safe loader with the limits: the reference for every message."""

    def __init__(self, stream):
        super().__init__(stream)            # checks the characters first
        self._start_counting()


BoundedLoader.add_constructor(_INT_TAG, _bounded_int)


def _fast_loader():
    """Where PyYAML has libyaml: (the same composer and limits over libyaml's scanner and
    parser; libyaml's own composer, the limits checked on its nodes).

    The nodes, values and line numbers are the same as the reference loader's. Only
    documents they read without complaint are taken from them.
    """
    if not getattr(yaml, "__with_libyaml__", False):
        return None
    from yaml._yaml import CParser
    from yaml.composer import Composer
    from yaml.constructor import SafeConstructor
    from yaml.resolver import Resolver

    class FastBoundedLoader(_Limits, Composer, CParser, SafeConstructor, Resolver):
        def __init__(self, stream):
            CParser.__init__(self, stream)
            Composer.__init__(self)
            SafeConstructor.__init__(self)
            Resolver.__init__(self)
            self._start_counting()

        def compose_node(self, parent, index):
            node = super().compose_node(parent, index)
            if _placed_elsewhere(node):
                raise _Declined
            return node

    class ComposedInC(yaml.CSafeLoader):
        """libyaml composes the nodes too (no alias, shallow by construction: ``_load``
        sends only such documents); the limits are checked on the nodes it built."""

        def get_single_node(self):
            node = super().get_single_node()
            if node is not None:
                _check_composed(node)
            return node
    for loader in (FastBoundedLoader, ComposedInC):
        loader.add_constructor(_INT_TAG, _bounded_int)
    return FastBoundedLoader, ComposedInC


def _check_composed(root) -> None:
    """The composer's limits on a finished node tree without aliases; any excess declines
    the document to the reference loader, which words the message."""
    pending, nodes = [(root, 1)], 0
    while pending:
        node, depth = pending.pop()
        nodes += 1
        if depth > limits.YAML_DEPTH or nodes > limits.YAML_NODES:
            raise _Declined
        if isinstance(node, yaml.ScalarNode):
            if _scalar_refused(node) or _placed_elsewhere(node):
                raise _Declined
        elif isinstance(node, yaml.SequenceNode):
            if len(node.value) > limits.LIST_ITEMS:
                raise _Declined
            pending.extend((item, depth + 1) for item in node.value)
        else:
            pending.extend((part, depth + 1) for pair in node.value for part in pair)


def _nesting_bound(text: str) -> int:
    """An upper bound of the nesting depth: every list or mapping needs one of these marks."""
    return sum(text.count(mark) for mark in "[{-:?") + 1


# libyaml's composer recurses in C: only documents this shallow (by _nesting_bound) go to it
_C_COMPOSER_DEPTH = 1_000


# where libyaml reads what the reference refuses (or reads otherwise): BOMs (it drops
# every one), tabs, and a comment straight after a block scalar's header ("|#")
_DIFFERENT_IN_LIBYAML = re.compile("[\ufeff\t]|[|>][-+0-9]*#")


class _Declined(Exception):
    """A document the fast loader leaves to the reference loader."""


_FAST_LOADER, _C_COMPOSED = _fast_loader() or (None, None)


def _yaml_error(exc: Exception, file: str) -> QcdoctorError:
    if isinstance(exc, _Refused):
        return QcdoctorError(exc.problem, file=file,
                             line=exc.mark.line + 1 if exc.mark else None, fix=exc.fix)
    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark or exc.context_mark
        return QcdoctorError(f"not valid YAML: {exc.problem or exc}", file=file,
                             line=mark.line + 1 if mark else None,
                             fix="check indentation and quoting around this line")
    return QcdoctorError(f"not valid YAML: {exc}", file=file)


def _check_size(text: str, file: str) -> None:
    if len(text) > limits.CASE_FILE_BYTES:
        raise QcdoctorError(f"{len(text):,} characters: larger than the "
                            f"{limits.size_text(limits.CASE_FILE_BYTES)} limit for this file",
                            file=file, fix="keep only the keys qcdoctor reads; attach data "
                                           "(tables, logs) as separate files")


def _load(text: str, file: str, single):
    _check_size(text, file)
    if _FAST_LOADER is not None and not _DIFFERENT_IN_LIBYAML.search(text):
        loader = None
        try:
            # anchors, aliases and deep nesting need the limits while composing
            composed_in_c = "&" not in text and "*" not in text and \
                _nesting_bound(text) <= _C_COMPOSER_DEPTH
            loader = (_C_COMPOSED if composed_in_c else _FAST_LOADER)(text)
            return single(loader)
        except Exception:  # noqa: BLE001 - any complaint: the reference loader words it
            pass
        finally:
            if loader is not None:
                loader.dispose()
    loader = None
    try:
        loader = BoundedLoader(text)        # checks the characters first
        return single(loader)
    except yaml.reader.ReaderError as exc:
        char = exc.character if isinstance(exc.character, int) else ord(exc.character[:1] or "?")
        raise QcdoctorError(f"not valid YAML: the character U+{char:04X} is not allowed in "
                            "YAML text", file=file, line=text.count("\n", 0, exc.position) + 1,
                            fix="remove control characters; save the file as plain text") from None
    except (_Refused, yaml.YAMLError) as exc:
        raise _yaml_error(exc, file) from None
    finally:
        if loader is not None:
            loader.dispose()


def load_plain(text: str, file: str):
    """A YAML document as Python values, within the limits (answers and config files)."""
    return _load(text, file, lambda loader: loader.get_single_data())


def load_document(text: str, file: str, spec: Mapping) -> tuple[dict, dict[str, int]]:
    """Compose ``text`` and read it with ``spec``: (values, key path -> line)."""
    ctx = _Ctx(file)
    node = _load(text, file, lambda loader: loader.get_single_node())
    if node is None or _is_null(node):
        return {}, {}
    try:
        values = spec.read(node, "", ctx)
    except _Skip:
        values = {}
    if ctx.problems:
        raise QcdoctorError.together(ctx.problems, limit=MAX_PROBLEMS)
    return values, ctx.lines
