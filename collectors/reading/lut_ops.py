"""Which ops J6 evaluates with a look-up table (knowledge.md §16 R3.11).

The op type decides wherever it is known: a ``Conv2d`` named ``exp_conv`` is a convolution.
A module name is read, by whole tokens, only when the op type is missing or generic (a
``FloatFunctional`` call without its method, a plain ``Module``).
"""

from __future__ import annotations

import re

# canonical name -> the spellings op types and module names use for it
_SPELLINGS = {
    "sigmoid": ("sigmoid",), "tanh": ("tanh",), "exp": ("exp",), "log": ("log",),
    "reciprocal": ("reciprocal",), "rsqrt": ("rsqrt",), "sqrt": ("sqrt",), "sin": ("sin",),
    "cos": ("cos",), "atan": ("atan", "arctan"), "erf": ("erf",), "pow": ("pow",),
    "silu": ("silu", "swish"), "gelu": ("gelu",), "mish": ("mish",),
    "softplus": ("softplus",), "softmax": ("softmax", "log_softmax", "logsoftmax"),
    "segment_lut": ("segment_lut", "segmentlut", "lut"),
}
LUT_OPS = tuple(_SPELLINGS)
_CANONICAL = {spelling: name for name, spellings in _SPELLINGS.items() for spelling in spellings}
# op types that say nothing about the computation: the module name is read instead
_GENERIC = {"", "floatfunctional", "qfunctional", "functional", "module", "graphmodule",
            "sequential", "function", "method", "call_function", "call_method", "call_module",
            "lambda", "custom", "unknown", "none", "nan", "operator"}
_WRAPPER = re.compile(r"^<(?:class|built-in (?:method|function)|function|method)\s+'?([^'\s>]+)")
_TOKEN = re.compile(r"[A-Za-z]+(?:_[A-Za-z]+)*")


def op_word(op_type: str) -> str:
    """The last part of an op type's qualified name, lower case: ``<class 'torch.nn.modules.
    activation.SiLU'>`` -> ``silu``, ``torch.Tensor.exp`` -> ``exp``, ``<built-in method
    sigmoid of type object ...>`` -> ``sigmoid``."""
    text = op_type.strip().strip("'\"")
    wrapped = _WRAPPER.match(text)
    if wrapped:
        text = wrapped.group(1)
    return text.rsplit(".", 1)[-1].strip("'\"<>() ").lower()


def _name_tokens(name: str) -> list[str]:
    """Whole tokens of a module path: ``head.exp_conv.0`` -> head, exp, conv; a compound
    spelling (``log_softmax``, ``segment_lut``) also counts as one token."""
    tokens = []
    for part in re.split(r"[.\d]+", name.lower()):
        for word in _TOKEN.findall(part):
            pieces = word.split("_")
            tokens += pieces
            tokens += ["_".join(pieces[i:i + 2]) for i in range(len(pieces) - 1)]
    return tokens


def lut_op(op_type: str, name: str = "") -> str | None:
    """The LUT op (a name of ``LUT_OPS``) that an op of ``op_type`` called ``name`` is, or
    None when it is none (or nothing tells)."""
    word = op_word(op_type or "")
    if word.replace("_", "") not in {g.replace("_", "") for g in _GENERIC}:
        if word in _CANONICAL:
            return _CANONICAL[word]
        squeezed = word.replace("_", "")
        for spelling, canonical in _CANONICAL.items():
            if squeezed == spelling.replace("_", ""):
                return canonical
        return None
    for token in reversed(_name_tokens(name or "")):     # the last word names the op best
        if token in _CANONICAL:
            return _CANONICAL[token]
    return None
