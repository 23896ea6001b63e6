"""Ready-to-paste code for next actions, from templates/snippets/<name>.py.j2.

Values in the snippets come from untrusted case folders (out_dir, layer and op names),
and users paste the code and run it. So the snippet environment emits every ``{{ }}``
as a Python literal (``repr``: quotes, escapes, never a line break), whatever the
template says; only :class:`Code` - identifiers checked here, vocabulary labels - is
emitted as is, and the ``comment`` filter makes text safe inside a ``#`` comment.

The prose of the comments is marked ``{% trans %}...{% endtrans +%}`` (Jinja2's i18n
extension, after the ``#``; the ``+`` keeps the line break trim_blocks would drop; a
message may go on over lines that start with ``#``) and is rendered in the report's
language from templates/snippet_comments.yaml, keyed by the English text with its line
breaks and ``#`` prefixes folded into single spaces. One compiled template serves every
language: the language is only the ``gettext`` a render passes. A message the catalogue
lacks stays English (the tests require every one).
"""

from __future__ import annotations

import keyword
import math
import re
from functools import lru_cache

from qcdoctor.collectors.reading.fx_graph import split_call
from qcdoctor.fact_types import LAYER_SEPARATOR
from qcdoctor.package_data import load_yaml
from qcdoctor.templating import new_environment
from qcdoctor.vocabulary import (
    OLD_ANALYSIS_NAMES,
    STAGE_LABELS,
    STAGE_VARIABLES,
    needs_two_runs,
    stage_label,
)
from qcdoctor.wording import id_words

# profiler releases before the rename call the types by these names
OLD_ANALYSIS_TYPE = {new: old for old, new in OLD_ANALYSIS_NAMES.items()}

# PEP 263: this in a source file's first two lines picks its encoding (utf-7 would let
# "+AAo-" become a line break), so emitted text never holds it verbatim
_CODING = re.compile(r"(coding)([:=])")


class Code(str):
    """Text emitted into a snippet as code, unchanged; built only by the helpers below."""


def identifier(name: str) -> Code:
    """A variable name for generated code; anything else is a bug, not a case problem."""
    if not name.isidentifier() or keyword.iskeyword(name):
        raise ValueError(f"not a Python identifier: {name!r}")
    return Code(name)


def comment(text) -> Code:
    """Text inside a ``#`` comment: escapes instead of line breaks and control characters."""
    body = repr(str(text))[1:-1]
    return Code(_CODING.sub(r"\1 \2", body))


def exact_number(value: float) -> Code:
    """A finite float written in full (repr: it reads back as the same float), where a value
    measured is set again (a scale), not shown rounded."""
    if not math.isfinite(value):
        raise ValueError("a snippet holds only finite numbers")
    return Code(repr(float(value)))


def python_literal(value) -> str:
    """What a ``{{ value }}`` becomes in a snippet: a literal, or checked code."""
    if isinstance(value, Code):
        return value
    if value is None or isinstance(value, bool):
        return repr(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError("a snippet holds only finite numbers")
        return f"{value:.6g}"
    text = repr(str(value))
    if text.startswith("'") and '"' not in value:
        text = '"' + text[1:-1] + '"'           # the quotes of the rest of the code
    # inside a literal the escape keeps the value and hides a PEP 263 cookie
    return text.replace("coding:", "coding\\x3a").replace("coding=", "coding\\x3d")


@lru_cache(maxsize=1)
def _environment():
    env = new_environment(filters={"comment": comment, "identifier": identifier},
                          finalize=python_literal)
    # one environment and compiled template for every language: a render passes its
    # gettext; newstyle, so gettext formats the values itself and a translated message
    # and its values take the same safety path as the English ones
    env.add_extension("jinja2.ext.i18n")
    env.newstyle_gettext = True
    return env


# a message going on in the next comment line: the break, its indentation and "#"
_CONTINUATION = re.compile(r"(\n[ \t]*#[ \t]*)")


def message_key(message: str) -> str:
    """A ``{% trans %}`` message as the catalogue knows it: the prose on one line."""
    return _CONTINUATION.sub(" ", message)


@lru_cache(maxsize=None)
def catalogue(lang: str) -> dict[str, str]:
    """English comment text -> its text in ``lang`` (for English: empty)."""
    if lang == "en":
        return {}
    return load_yaml("qcdoctor.templates", "snippet_comments.yaml").get(lang) or {}


def _comment_text(lines: list[str], joints: list[str], values: dict) -> Code:
    """``lines`` joined by ``joints``, each safe in a ``#`` comment, values as literals
    (or checked code) just as ``{{ }}`` makes them."""
    text = comment(lines[0]) + "".join(joint + comment(line)
                                       for joint, line in zip(joints, lines[1:], strict=True))
    text %= {name: python_literal(value) for name, value in values.items()}
    # a value right after the text could complete a PEP 263 cookie
    return Code(_CODING.sub(r"\1 \2", text))


def translator(table: dict[str, str]):
    """The ``gettext`` a render passes: messages from ``table``, English where it has none
    or a broken one (in production a comment is better English than no code at all)."""

    def gettext(message: str, **values) -> Code:
        parts = _CONTINUATION.split(message)
        translated = table.get(message_key(message))
        if translated is not None:
            lines = translated.split("\n")
            # its lines go on as the English ones do (a lone line: a plain comment line)
            joint = parts[1] if len(parts) > 1 else "\n# "
            try:
                return _comment_text(lines, [joint] * (len(lines) - 1), values)
            except (KeyError, ValueError, TypeError):
                pass
        return _comment_text(parts[::2], parts[1::2], values)

    return gettext


@lru_cache(maxsize=None)
def _gettext(lang: str):
    return translator(catalogue(lang))


def two_runs(baseline: str | None, analysis: str | None, case_context: dict) -> bool:
    return needs_two_runs(baseline, analysis, case_context.get("input_format_differs", False),
                          case_context.get("has_task_input", False))


def snippet_context(action: dict, case_context: dict, lang: str = "en") -> dict:
    baseline, analysis = action.get("baseline"), action.get("analysis")
    kind = action.get("analysis_model_type", "")
    stage = action.get("stage_to_evaluate")
    out_dir = _out_dir(action.get("out_dir") or case_context.get("out_dirs", {}).get(kind)
                       or f"qa_{kind or 'analysis'}")
    # knowledge.md §17 R4.6: before QAT has run, a qconfig change is calibrated again
    recalibrate = action.get("cost") == "recalibrate"
    return {
        **case_context,
        "action": action,
        "baseline": baseline, "analysis": analysis,
        "baseline_var": identifier(STAGE_VARIABLES.get(baseline, "baseline_model")),
        "analysis_var": identifier(STAGE_VARIABLES.get(analysis, "analysis_model")),
        # labels in the report's language: the board is a place, not a file
        "baseline_label": comment(stage_label(baseline, lang)),
        "analysis_label": comment(stage_label(analysis, lang)),
        "analysis_model_type": kind,
        "old_analysis_type": OLD_ANALYSIS_TYPE.get(kind, kind),
        "out_dir": out_dir,
        "two_runs": two_runs(baseline, analysis, case_context),
        # convert: the sensitivity run (qat.export.pt vs quantized.bc) has its own folder
        "sens_out_dir": out_dir.rstrip("/") + "_sens",
        "sens_two_runs": two_runs("qat_export", "quantized_bc", case_context),
        "stage": stage,
        "stage_label": comment(stage_label(stage, lang) if stage in STAGE_LABELS else ""),
        "stage_var": identifier(STAGE_VARIABLES.get(stage, "model")),
        "level": _level(action.get("level")),
        "old_level": action.get("old_level"),
        "plugin_numbering": case_context.get("plugin_numbering", "unknown"),
        "layer": action.get("layer", ""),
        # a call of a shared module (``head(1)``): the module, and the attribute the call's
        # own copy takes (knowledge.md R5.10)
        "layer_module": split_call(str(action.get("layer", "")))[0],
        "own_attribute": _own_attribute(str(action.get("layer", ""))),
        # a measured remedy (fix_trials.yaml): the fix and exactly the layers it was
        # measured on; a single ``layer`` stands for a list of one
        "fix": str(action.get("fix", "")),
        "fix_words": comment(id_words(str(action.get("fix", "")), lang)),
        "layers": _layers(action),
        "lut_ops": [op for op in str(action.get("ops", "")).split(",") if op],
        "limit": _number(action.get("limit")),
        # the quantization flow the analysed models come from, and the folder read
        "torch_ao": str(action.get("flow", "")).startswith("torch_ao"),
        "fx": action.get("flow") == "torch_ao_fx",
        "folder": _out_dir(str(action["folder"])) if action.get("folder") else None,
        # a measured fixed scale's qparams: (scale, zero point, quant_min, quant_max)
        "qparams": _qparams(action.get("qparams")),
        "recalibrate": recalibrate,
        "prepared": identifier("calib_model" if recalibrate else "qat_pt"),
    }


def _own_attribute(layer: str) -> Code:
    """``model.0.act(3)`` -> ``own_model_0_act_call3``: an identifier whatever the name holds
    (the words of the name kept, anything else dropped)."""
    module, call = split_call(layer)
    words = "_".join(re.findall(r"[A-Za-z0-9]+", module)) or "module"
    return identifier(f"own_{words}_call{call}")


def _layers(action: dict) -> list[str]:
    """The qualified layer names of ``layers`` (joined as fact fields join them; a name
    holding the separator is refused when fix_trials.yaml is read), else ``layer``."""
    if action.get("layers"):
        return [name for name in str(action["layers"]).split(LAYER_SEPARATOR) if name]
    return [str(action["layer"])] if action.get("layer") else []


def _qparams(text) -> tuple[Code, int, int, int] | None:
    """"scale, zero point, quant_min, quant_max" as fix_trials facts join them; the scale
    in full, as measured."""
    parts = str(text or "").split(",")
    try:
        scale, zero, low, high = float(parts[0]), int(parts[1]), int(parts[2]), int(parts[3])
    except (ValueError, IndexError):
        return None
    return (exact_number(scale), zero, low, high) if math.isfinite(scale) and scale > 0 \
        else None


def _level(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _number(text) -> float | None:
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def _out_dir(path: str) -> str:
    return path if path.startswith(("/", ".")) else f"./{path}"


def render_snippet(name: str, action: dict, case_context: dict, *, lang: str = "en") -> str:
    template = _environment().get_template(f"snippets/{name}.py.j2")
    context = snippet_context(action, case_context, lang)
    return template.render(**context, gettext=_gettext(lang)).strip() + "\n"
