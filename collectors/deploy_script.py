"""Read a user's compile script with ``ast`` - never imported, never executed.

It finds the hbdk4 calls that decide deployment consistency, in the order the script
runs them: the ``insert_*`` pre-processing inserts, ``remove_io_op``, ``convert`` and
``compile``, with their arguments. Aliases (``from hbdk4.compiler import convert as cv``,
``import hbdk4.compiler as hc``), keyword arguments, simple module constants (strings,
numbers, lists, ``[128.0] * 3``) and ``for`` loops over inputs are followed; calls inside
functions the script defines are followed where the script calls them. A value it
cannot resolve is ``UNKNOWN``, never guessed.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

from qcdoctor.engine.errors import QcdoctorError

from . import limits
from .reasons import reason

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


class _Unknown:
    def __repr__(self):
        return "UNKNOWN"


UNKNOWN = _Unknown()


@dataclass
class Call:
    name: str
    line: int
    order: int                      # execution order in the script
    args: dict = field(default_factory=dict)
    in_loop: bool = False


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

    # --- names ------------------------------------------------------------------
    def visit_Import(self, node):
        for alias in node.names:
            if alias.name.startswith("hbdk4"):
                self.modules.add(alias.asname or alias.name.split(".")[0])

    def visit_ImportFrom(self, node):
        if (node.module or "").startswith("hbdk4"):
            for alias in node.names:
                if alias.name in TRACKED:
                    self.aliases[alias.asname or alias.name] = alias.name
                else:
                    self.modules.add(alias.asname or alias.name)

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

    def visit_Call(self, node):
        for arg in list(node.args) + [k.value for k in node.keywords]:
            self.visit(arg)
        self.visit(node.func)
        name = self.tracked_name(node.func)
        if name:
            self.calls.append(Call(name, node.lineno, len(self.calls), self.arguments(name, node),
                                   self.loop_depth > 0))
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
            return self.aliases.get(func.id)
        if isinstance(func, ast.Attribute):
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
            keys = POSITIONAL.get(name, ())
            key = keys[index] if index < len(keys) else f"arg{index}"
            out[key] = self.value(arg)
        for keyword in node.keywords:
            if keyword.arg:
                out[keyword.arg] = self.value(keyword.value)
        return out

    # --- values -----------------------------------------------------------------
    def value(self, node):
        if isinstance(node, ast.Constant):
            return node.value
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
