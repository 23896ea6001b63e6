"""Read a user's compile script with ``ast`` - never imported, never executed.

It finds the hbdk4 calls that decide deployment consistency, in the order the script
runs them: the ``insert_*`` pre-processing inserts, ``remove_io_op``, ``convert`` and
``compile``, with their arguments. Aliases (``from hbdk4.compiler import convert as cv``,
``import hbdk4.compiler as hc``), keyword arguments, simple module constants (strings,
numbers, lists, ``[128.0] * 3``) and ``for`` loops over inputs are followed; calls inside
functions the script defines are followed where the script calls them. A value it
cannot resolve is ``UNKNOWN``, never guessed.

It also finds the plugin's ``set_fake_quantize`` and the ``export`` / ``pre_export``
calls, so the fake-quant state the model is exported in can be read off the script
(knowledge.md §5 user-side facts, §6): ``export_state``.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

from qcdoctor.collectors import limits
from qcdoctor.collectors.reasons import reason
from qcdoctor.errors import QcdoctorError

TRACKED = ("insert_image_preprocess", "insert_image_convert", "insert_transpose",
           "insert_roi_resize", "insert_split", "remove_io_op", "convert", "compile")
# positional parameter names, for matching positional arguments to keywords
POSITIONAL = {
    "insert_image_preprocess": ("mode", "divisor", "mean", "std"),
    "insert_image_convert": ("mode",),
    "insert_transpose": ("permutes",),
    "insert_roi_resize": ("mode",),
    "insert_split": ("dim",),
    "remove_io_op": ("op_types", "op_names"),
    "convert": ("module", "march"),
    "compile": ("module", "path", "march"),
}
# hbdk4 module functions (the rest are methods, recognised by name on any receiver)
MODULE_FUNCTIONS = ("convert", "compile")
# horizon_plugin_pytorch functions that decide the state a model is exported in; these are
# recognised only as the plugin's (imported from it, or called on its module): an
# ``export`` of any other library (torch.onnx.export) says nothing about fake quantization
SET_STATE = "set_fake_quantize"
EXPORT_CALLS = ("export", "pre_export")
PLUGIN_CALLS = (SET_STATE, *EXPORT_CALLS)
PLUGIN_POSITIONAL = {SET_STATE: ("model", "state"), "export": ("model", "example_inputs"),
                     "pre_export": ("model",)}
STATE_CLASS = "FakeQuantState"
# FakeQuantState members -> the state as case.yaml's fake_quant_state words it
FAKE_QUANT_STATES = {"_FLOAT": "float", "VALIDATION": "validation", "QAT": "qat",
                     "CALIBRATION": "calibration"}


class _Unknown:
    def __repr__(self):
        return "UNKNOWN"


UNKNOWN = _Unknown()


@dataclass(frozen=True)
class FakeQuantMember:
    """A ``FakeQuantState`` member the script names (``FakeQuantState._FLOAT``)."""
    member: str

    @property
    def state(self) -> str:
        return FAKE_QUANT_STATES[self.member]

    def __str__(self):
        return f"{STATE_CLASS}.{self.member}"


@dataclass
class Call:
    name: str
    line: int
    order: int                      # execution order in the script
    args: dict = field(default_factory=dict)
    in_loop: bool = False
    # the conditional blocks (if / else / except ...) the call sits in, outermost first:
    # a call whose blocks enclose another's runs whenever that one does
    branch: tuple = ()
    # the script's own functions being followed, and the model the call is given as
    # written (a name or attribute), for the plugin calls
    scope: tuple = ()
    target: str | None = None


class _Reader(ast.NodeVisitor):
    def __init__(self):
        self.constants: dict[str, object] = {}
        self.aliases: dict[str, str] = {}          # local name -> hbdk4 function
        self.modules: set[str] = set()             # local names of hbdk4 modules
        self.functions: dict[str, ast.FunctionDef] = {}
        self.calls: list[Call] = []
        self.loop_depth = 0
        self.stack: list[str] = []
        self.followed = 0          # calls of the script's own functions followed so far
        self.plugin_modules: set[str] = set()      # local names of horizon_plugin_pytorch modules
        self.plugin_aliases: dict[str, str] = {}   # local name -> plugin function
        self.state_classes: set[str] = set()       # local names of FakeQuantState
        self.branch: list[int] = []
        self.branches = 0

    # --- names ------------------------------------------------------------------
    def visit_Import(self, node):
        for alias in node.names:
            if alias.name.startswith("hbdk4"):
                self.modules.add(alias.asname or alias.name.split(".")[0])
            elif _is_plugin(alias.name):
                self.plugin_modules.add(alias.asname or alias.name.split(".")[0])

    def visit_ImportFrom(self, node):
        module = node.module or ""
        if module.startswith("hbdk4"):
            for alias in node.names:
                if alias.name in TRACKED:
                    self.aliases[alias.asname or alias.name] = alias.name
                elif alias.name in EXPORT_CALLS:
                    self.plugin_aliases[alias.asname or alias.name] = alias.name
                else:
                    self.modules.add(alias.asname or alias.name)
        elif _is_plugin(module):
            for alias in node.names:
                local = alias.asname or alias.name
                if alias.name == "*":
                    # what a star import of the plugin can bring into the script
                    self.plugin_aliases.update({name: name for name in PLUGIN_CALLS})
                    self.state_classes.add(STATE_CLASS)
                elif alias.name in PLUGIN_CALLS:
                    self.plugin_aliases[local] = alias.name
                elif alias.name == STATE_CLASS:
                    self.state_classes.add(local)
                else:
                    self.plugin_modules.add(local)

    def visit_FunctionDef(self, node):
        self.functions[node.name] = node          # followed when called

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Assign(self, node):
        value = self.value(node.value)
        for target in node.targets:
            if isinstance(target, ast.Name):
                if value is not UNKNOWN:
                    self.constants[target.id] = value
                else:
                    self.constants.pop(target.id, None)
        self.generic_visit(node)

    # --- control flow -----------------------------------------------------------
    def visit_For(self, node):
        self.visit(node.iter)
        self.loop_depth += 1
        for statement in node.body + node.orelse:
            self.visit(statement)
        self.loop_depth -= 1

    visit_While = visit_For

    def visit_If(self, node):
        self.visit(node.test)
        self.conditional(node.body, runs=_is_main_guard(node.test))
        self.conditional(node.orelse)

    def visit_IfExp(self, node):
        self.visit(node.test)
        self.conditional([node.body])
        self.conditional([node.orelse])

    def visit_Try(self, node):
        # the body and finally run; a handler or the else block only sometimes
        for statement in node.body:
            self.visit(statement)
        for handler in node.handlers:
            self.conditional([handler])
        self.conditional(node.orelse)
        for statement in node.finalbody:
            self.visit(statement)

    visit_TryStar = visit_Try

    def visit_Match(self, node):
        self.visit(node.subject)
        for case in node.cases:
            self.conditional([case])

    def conditional(self, nodes, runs: bool = False):
        """Visit ``nodes`` as a block that runs only sometimes (unless ``runs``)."""
        if not nodes:
            return
        if not runs:
            self.branches += 1
            self.branch.append(self.branches)
        for statement in nodes:
            self.visit(statement)
        if not runs:
            self.branch.pop()

    def visit_Call(self, node):
        for arg in list(node.args) + [k.value for k in node.keywords]:
            self.visit(arg)
        self.visit(node.func)
        name = self.tracked_name(node.func)
        if name:
            target = None
            if name in PLUGIN_CALLS and node.args and \
                    isinstance(node.args[0], (ast.Name, ast.Attribute)):
                target = ast.unparse(node.args[0])
            self.calls.append(Call(name, node.lineno, len(self.calls), self.arguments(name, node),
                                   self.loop_depth > 0, tuple(self.branch), tuple(self.stack),
                                   target))
        elif isinstance(node.func, ast.Name) and node.func.id in self.functions \
                and node.func.id not in self.stack \
                and self.followed < limits.SCRIPT_FOLLOWED_CALLS:
            # follow the script's own function (a budget: nested calls can multiply)
            self.followed += 1
            self.stack.append(node.func.id)
            for statement in self.functions[node.func.id].body:
                self.visit(statement)
            self.stack.pop()

    def tracked_name(self, func) -> str | None:
        if isinstance(func, ast.Name):
            return self.aliases.get(func.id) or self.plugin_aliases.get(func.id)
        if isinstance(func, ast.Attribute):
            if func.attr in PLUGIN_CALLS:
                root = _root(func.value)
                plugin = self.plugin_modules | (self.modules if func.attr in EXPORT_CALLS
                                                else set())
                return func.attr if root in plugin else None
            if func.attr in MODULE_FUNCTIONS:
                base = func.value
                root = base
                while isinstance(root, ast.Attribute):
                    root = root.value
                if isinstance(root, ast.Name) and (root.id in self.modules or root.id == "hbdk4"):
                    return func.attr
                return None
            if func.attr in TRACKED:
                return func.attr
        return None

    def arguments(self, name: str, node: ast.Call) -> dict:
        out: dict[str, object] = {}
        for index, arg in enumerate(node.args):
            keys = POSITIONAL.get(name, PLUGIN_POSITIONAL.get(name, ()))
            key = keys[index] if index < len(keys) else f"arg{index}"
            out[key] = self.value(arg)
        for keyword in node.keywords:
            if keyword.arg:
                out[keyword.arg] = self.value(keyword.value)
        return out

    # --- values -----------------------------------------------------------------
    def is_state_class(self, node) -> bool:
        """``node`` names FakeQuantState: imported, or reached through a plugin module."""
        if isinstance(node, ast.Name):
            return node.id in self.state_classes
        return isinstance(node, ast.Attribute) and node.attr == STATE_CLASS and \
            _root(node.value) in self.plugin_modules

    def value(self, node):
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Attribute) and self.is_state_class(node.value):
            return FakeQuantMember(node.attr) if node.attr in FAKE_QUANT_STATES else UNKNOWN
        if isinstance(node, ast.Name):
            return self.constants.get(node.id, UNKNOWN)
        if isinstance(node, (ast.List, ast.Tuple)):
            items = [self.value(e) for e in node.elts]
            return UNKNOWN if any(i is UNKNOWN for i in items) else items
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            inner = self.value(node.operand)
            return -inner if isinstance(inner, (int, float)) else UNKNOWN
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
            left, right = self.value(node.left), self.value(node.right)
            if isinstance(right, list) and isinstance(left, int):
                left, right = right, left
            if isinstance(left, list) and isinstance(right, int):
                return left * right if 0 <= len(left) * right <= limits.SCRIPT_LIST_ITEMS \
                    else UNKNOWN
            if isinstance(left, (int, float)) and isinstance(right, (int, float)):
                if isinstance(left, int) and isinstance(right, int) and \
                        left.bit_length() + right.bit_length() > 1024:
                    return UNKNOWN                 # x = x * x, repeated: no huge integers
                return left * right
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            left, right = self.value(node.left), self.value(node.right)
            if isinstance(left, (int, float)) and isinstance(right, (int, float)) and right:
                try:
                    return left / right
                except OverflowError:
                    return UNKNOWN
        return UNKNOWN


def _root(node) -> str | None:
    """The name an attribute chain starts from (``hc`` of ``hc.compiler.convert``)."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _is_plugin(module: str) -> bool:
    return module == "horizon_plugin_pytorch" or module.startswith("horizon_plugin_pytorch.")


def _is_main_guard(test) -> bool:
    """``if __name__ == "__main__":``: the block a script runs as a program."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1
            and isinstance(test.ops[0], ast.Eq)):
        return False
    sides = [test.left, test.comparators[0]]
    return any(isinstance(s, ast.Name) and s.id == "__name__" for s in sides) and \
        any(isinstance(s, ast.Constant) and s.value == "__main__" for s in sides)


@dataclass(frozen=True)
class ExportState:
    """The fake-quant state a script's last export runs in, and the lines that show it."""
    state: object                   # float | validation | qat | calibration, or UNKNOWN
    set_line: int                   # the set_fake_quantize call that decides it
    export_line: int
    export_call: str                # export | pre_export


def fake_quant_state(call: Call):
    """The state a ``set_fake_quantize`` call sets (``float``, ``validation``, ...), found in
    its ``state`` argument (positional or keyword) or, under another keyword, in whichever
    argument is a FakeQuantState member; UNKNOWN when it cannot be resolved."""
    values = [call.args.get("state", UNKNOWN)] + [v for k, v in call.args.items()
                                                  if k not in ("state", "model")]
    member = next((v for v in values if isinstance(v, FakeQuantMember)), None)
    return member.state if member else UNKNOWN


def export_state(calls: list[Call]) -> ExportState | None:
    """The state the model is in when the script's last ``export`` / ``pre_export`` runs
    (the artifact it writes last is the one deployed; a ``_FLOAT`` diagnostic before a
    ``VALIDATION`` re-export is no export state). An export in a block that runs only
    sometimes (if / else, except) may not be the last to run: the exports that can be
    last must agree, else the state is UNKNOWN. None when the script exports nothing or
    never sets the state before its last export."""
    exports = [c for c in calls if c.name in EXPORT_CALLS]
    if not exports:
        return None
    last = exports[-1]
    # an export is never the last to run when a later one runs whenever it does
    could_be_last = []
    for export in reversed(exports):
        if not any(_runs_with(later, export) for later in could_be_last):
            could_be_last.append(export)
    found = [_state_at(calls, export) for export in could_be_last]
    state, setter = found[0]
    if setter is None:
        return None
    if any(other != state for other, _ in found[1:]):
        state = UNKNOWN
    return ExportState(state, setter.line, last.line, last.name)


def _runs_with(call: Call, other: Call) -> bool:
    """``call`` runs whenever ``other`` does: its blocks enclose ``other``'s."""
    return other.branch[:len(call.branch)] == call.branch


def _state_at(calls: list[Call], export: Call) -> tuple[object, Call | None]:
    """(state, the set_fake_quantize call that decides it) when ``export`` runs: the last
    one before it that runs whenever it does; one in a block that runs only sometimes
    leaves the state UNKNOWN unless it sets the state already in force. (None, None) when
    none sets it."""
    state, setter = None, None
    for call in calls:
        if call is export:
            break
        if call.name != SET_STATE or _other_model(call, export):
            continue
        value = fake_quant_state(call)
        if _runs_with(call, export):
            state, setter = value, call
        elif value != state:
            state, setter = UNKNOWN, call       # set in one branch only: either state
    return state, setter


def _other_model(setter: Call, export: Call) -> bool:
    """The state is set on another model than the one exported (a copy for the _FLOAT
    diagnostic): both named, in the same function, differently."""
    return setter.scope == export.scope and None not in (setter.target, export.target) \
        and setter.target != export.target


NORMALISATION_ARGS = ("mean", "std", "divisor")


def preprocess_normalisation(call: Call | None) -> dict:
    """What an ``insert_image_preprocess`` call normalises with: (x / divisor - mean) / std.

    mean, std and divisor belong together: values written for divisor 255 mean something
    else with divisor 1. An argument the call leaves out is UNKNOWN (hbdk4 releases differ
    in what they infer for it), never a default; {} without such a call.
    """
    if call is None:
        return {}
    return {name: call.args.get(name, UNKNOWN) for name in NORMALISATION_ARGS}


def read_script(path: Path) -> list[Call]:
    """The tracked hbdk4 calls of a script, in execution order."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise QcdoctorError(reason("cannot read the deploy script: {error}", error=exc),
                            file=str(path),
                            fix=reason("give deploy.script as a path relative to the case "
                                       "folder")) from None
    try:
        tree = ast.parse(text, filename=str(path))
        reader = _Reader()
        for statement in tree.body:
            reader.visit(statement)
    except SyntaxError as exc:
        raise QcdoctorError(reason("the deploy script is not valid Python: {error}",
                                   error=exc.msg), file=str(path),
                            line=exc.lineno, fix=reason("send the script as it runs")) from None
    except (RecursionError, MemoryError):
        raise QcdoctorError(reason("the deploy script nests expressions too deeply to read"),
                            file=str(path), fix=reason("send the script as it runs; a generated "
                                                       "script can be cut to its hbdk4 calls")
                            ) from None
    except ValueError as exc:              # e.g. a null byte in the source
        raise QcdoctorError(reason("the deploy script cannot be read as Python: {error}",
                                   error=exc),
                            file=str(path), fix=reason("send the script as it runs")) from None
    return reader.calls
