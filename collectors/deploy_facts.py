"""Deployment facts (knowledge.md §10): from case.yaml's deploy, the compile script
(read statically) and the hb_compile YAML. Each fact compares what training used with
what deployment does; the deploy/ rules turn them into checklist results.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from qcdoctor.collectors.case_file import Case
from qcdoctor.collectors.deploy_discovery import (
    CONFIG_NAME_WORDS,
    chosen,
    find_compile_configs,
    find_compile_scripts,
)
from qcdoctor.collectors.deploy_script import (
    PLUGIN_CALLS,
    UNKNOWN,
    Call,
    export_state,
    preprocess_normalisation,
    read_script,
)
from qcdoctor.collectors.files import ArtifactRefused, CaseFiles
from qcdoctor.collectors.hb_compile_yaml import NORM_TYPES, read_hb_compile
from qcdoctor.collectors.reasons import artifact_problem, reason
from qcdoctor.errors import QcdoctorError
from qcdoctor.fact_types import MARCHES
from qcdoctor.source_locations import at, case_key, joined

# which checklist item a train-vs-board comparison belongs to
COMPARED = {"normalisation": "input_preprocessing", "color": "input_preprocessing",
            "resize": "input_preprocessing", "input_scale": "input_scale",
            "padding": "padding", "postprocess": "pre_post_nodes"}
NHWC_SOURCES = ("pyramid", "resizer")
PROFILER_DECIMALS_HALF = 0.5e-7         # QuantAnalysis tables print 7 decimals
# hb_compile / hb_mapper configs print 6-8 digits: their values agree within this
# relative difference (knowledge.md R5.9: 0.01712475 is 1/58.395)
CONFIG_RELATIVE = 1e-3
SCRIPT_NAME_WORDS = ("compile", "hb_", "deploy", "convert")


def _text(value) -> str:
    if value is UNKNOWN:
        return "unknown"
    if value is None:
        return "None"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_text(v) for v in value) + "]"
    return str(value)


def _missing(value) -> bool:
    """No value: absent, unresolvable, or written as "unknown" (never compared as a value)."""
    return value is None or value is UNKNOWN or (
        isinstance(value, str) and value.strip().lower() in ("", "unknown"))


def _same(a, b) -> str:
    if _missing(a) or _missing(b):
        return "unknown"
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        if len(a) == 1 and len(b) > 1:
            a = list(a) * len(b)
        if len(b) == 1 and len(a) > 1:
            b = list(b) * len(a)
        if len(a) != len(b):
            return "no"
        if not all(isinstance(v, (int, float)) for v in [*a, *b]):
            return "unknown"
        return "yes" if all(abs(float(x) - float(y)) <= 1e-6 * max(1.0, abs(float(y)))
                            for x, y in zip(a, b, strict=True)) else "no"
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return "yes" if abs(a - b) <= 1e-9 * max(1.0, abs(b)) else "no"
    return "yes" if str(a).strip().lower() == str(b).strip().lower() else "no"


@dataclass
class DeployFiles:
    """The compile script and the hb_compile config of a case, read once: the platform
    may come from them (``stated_march``) before the deployment facts are built."""
    calls: list[Call] = field(default_factory=list)
    script_source: str = ""
    config: dict | None = None
    config_source: str = ""
    problems: list[dict] = field(default_factory=list)
    found: list[dict] = field(default_factory=list)     # deploy_found facts


def read_deploy_files(case: Case, files: CaseFiles | None = None) -> DeployFiles:
    """The script and config case.yaml names (deploy.script / deploy.config), else the
    ones found in the case folder, as the intake finds them."""
    files = files or CaseFiles(case.folder)
    deploy = dict(case.get("deploy", {}))
    problems: list[dict] = []
    found = _discover(case, deploy, files) if case.folder is not None else []
    calls, script_source = _script(case, deploy, problems, files)
    config, config_source = _config(case, deploy, problems, files)
    return DeployFiles(calls, script_source, config, config_source, problems, found)


def _discover(case: Case, deploy: dict, files: CaseFiles) -> list[dict]:
    """deploy_found facts for a script / config case.yaml does not name, and the one
    chosen written into ``deploy`` (a copy) as if named: several candidates are all
    named, and the one whose name says what it is read (none when that leaves several)."""
    facts = []
    for kind, finder, words in (("script", find_compile_scripts, SCRIPT_NAME_WORDS),
                                ("config", find_compile_configs, CONFIG_NAME_WORDS)):
        if deploy.get(kind):
            continue
        candidates = finder(case.folder, files)
        if not candidates:
            continue
        pick = chosen(candidates, words)
        if pick:
            deploy[kind] = pick
        facts.append({"type": "deploy_found", "kind": kind, "file": pick or "",
                      "candidates": ", ".join(candidates), "count": len(candidates),
                      "source": pick or ", ".join(candidates),
                      "locations": joined(*(at(c) for c in candidates))})
    return facts


def stated_march(read: DeployFiles) -> tuple[str, str, list[dict]] | None:
    """(march, source, locations) when the script's convert and compile calls and the
    config name one known march between them: the platform the user deploys to, for a
    case that names none itself (knowledge.md §7 asks for it, §10 compares it). A file
    found in the case folder, not named in case.yaml, names no platform: its march is only
    offered to confirm (the intake's chip default)."""
    unnamed = {f["file"] for f in read.found}
    calls = [] if read.script_source in unnamed else read.calls
    found = []
    for name in ("convert", "compile"):
        call = _last(calls, name)
        if call is not None and isinstance(call.args.get("march"), str):
            found.append((call.args["march"], f"{read.script_source} line {call.line}",
                          at(read.script_source, call.line)))
    if read.config and read.config.get("march") and read.config_source not in unnamed:
        found.append((read.config["march"], f"{read.config_source} (model_parameters.march)",
                      at(read.config_source)))
    marches = {m.strip().lower() for m, _, _ in found}
    if len(marches) != 1 or next(iter(marches)) not in MARCHES[:-1]:
        return None          # none, several, or one this tool does not know
    march, source, places = found[0]
    return march.strip().lower(), source, places


def collect_deploy(case: Case, platform: dict, board_march: tuple[str, str] | None,
                   files: CaseFiles | None = None, board_locations: list[dict] = (),
                   read: DeployFiles | None = None, platform_from_deploy: bool = False,
                   profiler_scale: tuple[float, str, list[dict]] | None = None
                   ) -> list[dict]:
    """All deployment facts of a case (empty when it says nothing about deployment);
    ``board_locations``: where the case folder's board file names ``board_march``;
    ``read``: the script and config when already read; ``platform_from_deploy``: the
    platform was taken from them (``stated_march``), so it is no second opinion on their
    march; ``profiler_scale``: (value, source, locations) of the input QuantStub's scale
    in the QuantAnalysis outputs, the QAT calibration scale when case.yaml gives none.

    Each fact carries its provenance twice: as text (``source``) and as data
    (``locations``: files relative to the case folder and lines, for SARIF)."""
    files = files or CaseFiles(case.folder)
    deploy = case.get("deploy", {})
    read = read or read_deploy_files(case, files)
    facts: list[dict] = list(read.problems)
    calls, script_source = read.calls, read.script_source
    exported_by = script_source
    if calls and all(c.name in PLUGIN_CALLS for c in calls):
        # an export script (the plugin's calls only) tells the export state, nothing of
        # the compile flow: no compile-script checks read it
        calls, script_source = [], ""
    config, config_source = read.config, read.config_source
    train, board = dict(deploy.get("train", {})), dict(deploy.get("board", {}))
    train_at: dict[str, tuple[str, list[dict], float]] = {}
    if profiler_scale and "input_scale" not in train and board.get("input_scale") is not None:
        # only where there is a board scale to compare it with; the profiler prints
        # scales with 7 decimals, so they agree within half a unit of the last one
        train["input_scale"] = profiler_scale[0]
        train_at["input_scale"] = (*profiler_scale[1:], PROFILER_DECIMALS_HALF)
    preprocess = _last(calls, "insert_image_preprocess")
    stated = preprocess_normalisation(preprocess)
    normalised_at = None
    if any(value is not UNKNOWN for value in stated.values()):
        # the inserted node does the board-side normalisation: mean, std and divisor are
        # taken together (one left out is unknown, never case.yaml's nor 1)
        board.update(stated)
        if "mean" in preprocess.args:
            normalised_at = (f"{script_source} line {preprocess.line}",
                             at(script_source, preprocess.line))
    elif _config_normalisation(config):
        # hb_compile inserts the normalisation its norm_type and values describe
        config_map = _config_normalisation(config)
        board.update(config_map)
        normalised_at = (f"{config_source} (input_parameters, input {config_map['input']})",
                         at(config_source))
    facts += read.found
    if config:
        facts += _config_facts(config, config_source, bool(script_source))
    config_color = _config_color(config)
    if config_color and not train.get("color"):
        # the config says what the model was trained on: no question for it
        train["color"] = config_color
    elif config_color and str(train["color"]).lower() in ("rgb", "bgr") \
            and config_color in ("rgb", "bgr"):
        facts.append(_color_against_config(case, train["color"], config_color,
                                           config_source))
    if script_source:
        names = {c.name for c in calls}
        facts.append({"type": "deploy_script", "read": True,
                      "inserts": any(n.startswith("insert_") for n in names),
                      "removes_io": "remove_io_op" in names, "converts": "convert" in names,
                      "compiles": "compile" in names, "source": script_source,
                      "locations": at(script_source)})
    facts += _comparisons(case, train, board, deploy, preprocess, normalised_at, train_at)
    facts += _march(calls, config, {} if platform_from_deploy else platform, board_march,
                    script_source, config_source, board_locations)
    facts += _order(calls, script_source) if calls else _declared_nodes(case, deploy)
    facts += _preprocess(case, train, calls, script_source)
    facts += _layout(case, train, board, calls, config, script_source)
    facts += _nv12(case, board, calls, config, config_source)
    facts += _input_types(config, config_source) or _declared_input_types(
        case, train, board, calls, script_source)
    facts += _core_num(config, calls, platform, config_source, script_source)
    facts += _export_state(case, read.calls, exported_by)
    board_width = _board_width(board, config)
    facts += _strides(case, board, calls, config, board_width)
    return facts


def _script(case, deploy, facts, files):
    name = deploy.get("script")
    if not name or case.folder is None:
        return [], ""
    path = case.folder / name
    if not os.path.lexists(path) and case.get("deploy", {}).get("script"):
        facts.append({**artifact_problem(name, reason("file not found"), False,
                                         case.source("deploy.script")),
                      "locations": case_key(case, "deploy.script")})
        return [], ""
    try:
        return read_script(files.check(path, "script", case.source("deploy.script"))), name
    except ArtifactRefused:
        return [], ""
    except QcdoctorError as exc:
        facts.append({**artifact_problem(name, exc.problem, False, name),
                      "locations": at(name, exc.line)})
        return [], ""


def _config(case, deploy, facts, files):
    name = deploy.get("config")
    if not name or case.folder is None:
        return None, ""
    path = case.folder / name
    if not os.path.lexists(path) and case.get("deploy", {}).get("config"):
        facts.append({**artifact_problem(name, reason("file not found"), False,
                                         case.source("deploy.config")),
                      "locations": case_key(case, "deploy.config")})
        return None, ""
    try:
        return read_hb_compile(files.check(path, "config", case.source("deploy.config"))), name
    except ArtifactRefused:
        return None, ""
    except QcdoctorError as exc:
        facts.append({**artifact_problem(name, exc.problem, False, name),
                      "locations": at(name, exc.line)})
        return None, ""


def _last(calls: list[Call], name: str) -> Call | None:
    found = [c for c in calls if c.name == name]
    return found[-1] if found else None


def _comparisons(case, train, board, deploy, preprocess, normalised_at, train_at) -> list[dict]:
    """``normalised_at``: (source, locations) of a board normalisation the script or the
    config states; ``train_at``: the same for training values not from case.yaml."""
    if not (train or board or preprocess or "postprocess_same" in deploy):
        return []
    facts = [_normalisation(case, train, board, normalised_at, deploy.get("train", {}))]
    for item in ("resize", "padding", "input_scale"):
        t, b = train.get(item), board.get(item)
        source = case.source(f"deploy.board.{item}")
        train_source, train_places, slack = train_at.get(
            item, (case.source(f"deploy.train.{item}"), case_key(case, f"deploy.train.{item}"),
                   0.0))
        equal = _same(t, b)
        if slack and equal == "no" and abs(t - b) <= slack * (1 + 1e-6):
            equal = "yes"
        facts.append({"type": "deploy_compare", "item": item, "check": COMPARED[item],
                      "missing": "", "train": _text(t) if t is not None else "unknown",
                      "board": _text(b) if b is not None else "unknown",
                      "equal": equal, "source": f"{train_source}; {source}",
                      "locations": joined(train_places,
                                          case_key(case, f"deploy.board.{item}"))})
    if train.get("color") and board.get("color") and board["color"] not in ("nv12", "yuv444", "gray") \
            and train["color"] in ("rgb", "bgr"):
        facts.append({"type": "deploy_compare", "item": "color", "check": "input_preprocessing",
                      "missing": "",
                      "train": train["color"], "board": board["color"],
                      "equal": _same(train["color"], board["color"]),
                      "source": case.source("deploy.board.color"),
                      "locations": case_key(case, "deploy.board.color")})
    same = deploy.get("postprocess_same")
    facts.append({"type": "deploy_compare", "item": "postprocess", "check": "pre_post_nodes",
                  "missing": "",
                  # as DP010/DP011/DP013 word them ("training uses the evaluation's decode,
                  # the board a decode of its own"), never a word twice
                  "train": "the evaluation's decode",
                  "board": {"yes": "the same decode", "no": "a decode of its own"}.get(
                      same, "its own decode"), "equal": same or "unknown",
                  "source": case.source("deploy.postprocess_same"),
                  "locations": case_key(case, "deploy.postprocess_same")})
    return facts


def _affine(side: dict):
    """(x / divisor - mean) / std as per-channel (scale, offset), or None when incomplete."""
    mean, std = side.get("mean"), side.get("std")
    divisor = side.get("divisor", 1)
    values = (mean, std, divisor)
    if any(v is None or v is UNKNOWN for v in values):
        return None
    mean = mean if isinstance(mean, (list, tuple)) else [mean]
    std = std if isinstance(std, (list, tuple)) else [std]
    if any(not isinstance(v, (int, float)) for v in [*mean, *std, divisor]) or \
            any(v == 0 for v in [*std, divisor]):
        return None
    width = max(len(mean), len(std))
    if not mean or not std or {len(mean), len(std)} - {1, width}:
        return None                    # no values, or channel counts that do not pair up
    mean, std = list(mean) * (width // len(mean)), list(std) * (width // len(std))
    try:
        return ([1.0 / (divisor * s) for s in std],
                [-m / s for m, s in zip(mean, std, strict=True)])
    except (ZeroDivisionError, OverflowError):     # products below the smallest float
        return None


def _unit_scale(side: dict) -> bool:
    """mean and std all within [0, 1]: values written for x in [0, 1] (0.485, 0.229)."""
    values = [*(side["mean"] if isinstance(side["mean"], (list, tuple)) else [side["mean"]]),
              *(side["std"] if isinstance(side["std"], (list, tuple)) else [side["std"]])]
    return all(abs(float(v)) <= 1.0 for v in values)


def _close(a: list[float], b: list[float]) -> bool:
    """Per channel within CONFIG_RELATIVE of the larger (one value stands for all)."""
    width = max(len(a), len(b))
    a, b = list(a) * (width // len(a)), list(b) * (width // len(b))
    return len(a) == len(b) and all(abs(x - y) <= CONFIG_RELATIVE * max(abs(x), abs(y))
                                    for x, y in zip(a, b, strict=True))


_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


def _numbers(text) -> list[float]:
    """The numbers of an hb_compile value ("123.675 116.28 103.53", or a list)."""
    return [float(n) for n in _NUMBER.findall(str(text))] if text is not None else []


def _config_normalisation(config) -> dict:
    """The board-side normalisation of the config's first input that states one, as
    hb_compile computes it on the pixel scale: x -> (x - mean_value) * scale_value, or
    (x - mean_value) / std_value (knowledge.md R5.9). norm_type says which parts apply
    (data_scale: no mean, data_mean: no scale, no_preprocess: neither); without it, mean
    and scale are taken together (one left out is unknown). {} when it names none."""
    for index, row in enumerate((config or {}).get("inputs") or []):
        norm = str(row.get("norm_type") or "").strip().lower()
        mean, scale, std = (_numbers(row.get(k))
                            for k in ("mean_value", "scale_value", "std_value"))
        if not (mean or scale or std) and norm not in NORM_TYPES:
            continue
        if not scale and std and all(std):
            scale = [1.0 / s for s in std]
        if norm in ("no_preprocess", "data_scale"):
            mean = [0.0]
        if norm in ("no_preprocess", "data_mean"):
            scale = [1.0]
        return {"mean": mean or UNKNOWN,
                "std": [1.0 / v for v in scale] if scale and all(scale) else UNKNOWN,
                "divisor": 1, "input": index,
                "shown": f"(x - {_written(mean)}) × {_written(scale)}"}
    return {}


def _written(values: list[float]) -> str:
    """Config values as it prints them, every digit (0.01712475, not 0.0171248)."""
    return "[" + ", ".join(repr(v) for v in values) + "]" if values else "unknown"


def _config_color(config) -> str:
    """The colour space the config says the model was trained on (its first image input)."""
    for row in (config or {}).get("inputs") or []:
        kind = str(row.get("input_type_train") or "").strip().lower()
        if kind in ("rgb", "bgr", "yuv444", "gray"):
            return kind
    return ""


def _color_against_config(case, train_color, config_color, config_source) -> dict:
    """case.yaml's training colour against the config's input_type_train: hb_compile
    converts the board data into input_type_train, so the two must be the same."""
    return {"type": "deploy_compare", "item": "color", "check": "input_preprocessing",
            "missing": "", "train": str(train_color).lower(), "board": config_color,
            "equal": _same(str(train_color).lower(), config_color),
            "source": f"{case.source('deploy.train.color')}; "
                      f"{config_source} (input_parameters.input_type_train)",
            "locations": joined(case_key(case, "deploy.train.color"), at(config_source))}


def _config_facts(config: dict, config_source: str, with_script: bool) -> list[dict]:
    """What the config itself sets, for the report: march and chip, inputs, node types,
    optimization; and the nodes it removes. ``with_script``: a compile script was read."""
    chip = config.get("chip") or ""
    types = config.get("node_types") or {}
    settings = list(config.get("optimization") or [])
    if config.get("quant_config"):
        settings.append(f"quant_config {config['quant_config']}")
    facts = [{"type": "deploy_config", "march": config.get("march") or "", "chip": chip,
              "j6": "unknown" if not chip else ("yes" if chip.startswith("J6") else "no"),
              "inputs": len(config.get("inputs") or []),
              "norm_types": "; ".join(str(r.get("norm_type") or "-")
                                      for r in config.get("inputs") or []),
              "int16_nodes": sum("int16" in kind for kind in types.values()),
              "node_types": ", ".join(f"{node}: {kind}" for node, kind in types.items()),
              "optimization": "; ".join(settings), "with_script": with_script,
              "source": config_source, "locations": at(config_source)}]
    removed = config.get("removed_nodes") or []
    if removed:
        facts.append({"type": "removed_nodes", "count": len(removed),
                      "names": ", ".join(removed),
                      "source": f"{config_source}: model_parameters.remove_node_name",
                      "locations": at(config_source)})
    return facts


def _normalisation(case, train, board, normalised_at, given_train) -> dict:
    """Compare what the normalisations compute, not how they are written; values from a
    config agree within its printed digits (CONFIG_RELATIVE). ``given_train``: case.yaml's
    deploy.train, to tell a divisor it states from the default."""
    def shown(side):
        if side.get("shown"):
            return side["shown"]
        if side.get("mean") is None and side.get("std") is None:
            return "unknown"
        return (f"(x / {_text(side.get('divisor', 1))} - {_text(side.get('mean'))}) / "
                f"{_text(side.get('std'))}")
    t, b = _affine(train), _affine(board)
    missing = ""
    if t is not None and b is not None and "divisor" not in given_train \
            and _unit_scale(train):
        # written for x in [0, 1] with no divisor: 1 or 255 is not known (ask, not fail)
        t, missing = None, "divisor"
    if t is None or b is None:
        equal = "unknown"
    elif "shown" in board:
        equal = "yes" if _close(t[0], b[0]) and _close(t[1], b[1]) else "no"
    else:
        equal = "yes" if _same(t[0], b[0]) == "yes" and _same(t[1], b[1]) == "yes" else "no"
    where, places = normalised_at or (case.source("deploy.board.mean"),
                                      case_key(case, "deploy.board.mean"))
    return {"type": "deploy_compare", "item": "normalisation", "check": "input_preprocessing",
            "train": shown(train), "board": shown(board), "equal": equal, "missing": missing,
            "source": f"{case.source('deploy.train.mean')}; {where}",
            "locations": joined(case_key(case, "deploy.train.mean"), places)}


def _march(calls, config, platform, board_march, script_source, config_source,
           board_locations) -> list[dict]:
    convert = _last(calls, "convert")
    compile_ = _last(calls, "compile")
    values = {
        "convert": convert.args.get("march", UNKNOWN) if convert else UNKNOWN,
        "compile": (compile_.args.get("march", UNKNOWN) if compile_ else
                    (config or {}).get("march") or UNKNOWN),
        "platform": platform.get("march") if platform.get("known") else UNKNOWN,
        "board": board_march[0] if board_march else UNKNOWN,
    }
    known = {k: v for k, v in values.items() if v is not UNKNOWN and isinstance(v, str)}
    if len(known) < 2:                   # one march alone compares with nothing
        return []
    distinct = set(known.values())
    consistent = "no" if len(distinct) > 1 else ("yes" if len(known) == len(values) else "unknown")
    sources = [s for s in (script_source, config_source, platform.get("source", ""),
                           board_march[1] if board_march else "") if s]
    return [{"type": "march_check", **{k: _text(v) for k, v in values.items()},
             "prepare": "",             # model_check_result's, where one is read (case_facts)
             "consistent": consistent,
             "differing": ", ".join(f"{k}={v}" for k, v in known.items()) if len(distinct) > 1 else "",
             "source": "; ".join(sources),
             "locations": joined(at(script_source), at(config_source), platform,
                                 board_locations if board_march else [])}]


def _order(calls, script_source) -> list[dict]:
    convert = _last(calls, "convert")
    facts = []
    for call in calls:
        if call.name.startswith("insert_"):
            before = "unknown" if convert is None else ("yes" if call.order < convert.order else "no")
            facts.append({"type": "insert_call", "name": call.name, "line": call.line,
                          "before_convert": before, "source": f"{script_source} line {call.line}",
                          "locations": at(script_source, call.line)})
    removals = [c for c in calls if c.name == "remove_io_op"]
    # the I/O types follow from everything the script removes, over all its calls
    removed = _removed_io_ops(removals)
    for call in removals:
        after = "unknown" if convert is None else ("yes" if call.order > convert.order else "no")
        facts.append({"type": "qdq_removal", "line": call.line, "after_convert": after,
                      **removed, "source": f"{script_source} line {call.line}",
                      "locations": at(script_source, call.line)})
    return facts


def _removed_io_ops(removals: list[Call]) -> dict[str, str]:
    """{quantize, dequantize}: yes / no / unknown over every remove_io_op call."""
    names, unresolved = [], False
    for call in removals:
        types = call.args.get("op_types", call.args.get("op_names", UNKNOWN))
        if isinstance(types, list):
            names += [str(t).lower() for t in types]
        else:
            unresolved = True

    def removed(found: bool) -> str:
        return "yes" if found else ("unknown" if unresolved else "no")
    return {"quantize": removed(any(n == "quantize" or n.endswith("quantize") and "de" not in n
                                    for n in names)),
            "dequantize": removed(any("dequantize" in n for n in names))}


def _declared_nodes(case, deploy) -> list[dict]:
    """Without a script, the nodes case.yaml says were removed tell the I/O types."""
    removed = [str(n).lower() for n in deploy.get("nodes", {}).get("removed", [])]
    if not removed:
        return []
    return [{"type": "qdq_removal", "line": 0, "after_convert": "unknown",
             "quantize": "yes" if "quantize" in removed else "no",
             "dequantize": "yes" if "dequantize" in removed else "no",
             "source": case.source("deploy.nodes.removed"),
             "locations": case_key(case, "deploy.nodes.removed")}]


def _preprocess(case, train, calls, script_source) -> list[dict]:
    if not script_source:
        return _declared_preprocess(case, train)
    call = _last(calls, "insert_image_preprocess")
    convert_nv12 = any(c.name == "insert_image_convert" for c in calls)
    if call is None and not convert_nv12:
        return []
    mode = "not_inserted" if call is None else _text(call.args.get("mode", UNKNOWN))
    return [{"type": "preprocess_mode", "mode": mode, "train_color": train.get("color", "unknown"),
             "source": f"{script_source} line {call.line}" if call else script_source,
             "locations": at(script_source, call.line if call else None)}]


def _declared_preprocess(case, train) -> list[dict]:
    """Without a script, the nodes case.yaml lists can still show an NV12 conversion with
    no pre-processing node before it (the mode of a listed one is not known)."""
    declared = [str(n).lower() for n in case.get("deploy", {}).get("nodes", {}).get("inserted", [])]
    converts = any("image_convert" in n or "nv12" in n for n in declared)
    if not converts or any("preprocess" in n for n in declared):
        return []
    return [{"type": "preprocess_mode", "mode": "not_inserted",
             "train_color": train.get("color", "unknown"),
             "source": case.source("deploy.nodes.inserted"),
             "locations": case_key(case, "deploy.nodes.inserted")}]


def _layout(case, train, board, calls, config, script_source) -> list[dict]:
    transpose = _last(calls, "insert_transpose")
    source_kind = board.get("input_source")
    if config and config["inputs"]:
        source_kind = source_kind or config["inputs"][0].get("input_source")
    nv12 = any(c.name == "insert_image_convert" for c in calls) or board.get("color") == "nv12"
    input_layout = board.get("layout") or ("NHWC" if source_kind in NHWC_SOURCES or nv12 else None)
    train_layout = train.get("layout") or ((config or {}).get("inputs") or [{}])[0].get("input_layout_train")
    if not (train_layout or input_layout or transpose):
        return []
    permutes = transpose.args.get("permutes", UNKNOWN) if transpose else None
    transposed = "yes" if transpose else ("no" if script_source else "unknown")
    declared = [str(n).lower() for n in case.get("deploy", {}).get("nodes", {}).get("inserted", [])]
    if not script_source and declared:
        transposed = "yes" if any("transpose" in n for n in declared) else "no"
    # hbdk semantics (permutes[i]: the new position of old dim i): the inserted transpose
    # turns the model's input layout into the board's, so an NHWC-trained model fed NCHW
    # data needs the inverse of the usual NCHW->NHWC permutes
    needed = [0, 2, 3, 1] if (train_layout, input_layout) == ("NHWC", "NCHW") else [0, 3, 1, 2]
    return [{"type": "layout_check", "train_layout": train_layout or "unknown",
             "input_layout": input_layout or "unknown", "transpose": transposed,
             "known": bool(train_layout and input_layout) and transposed != "unknown",
             "permutes_ok": ("unknown" if not isinstance(permutes, (list, tuple)) else
                             "yes" if list(permutes) == needed else "no"),
             "permutes": _text(permutes) if transpose else "",
             "source": f"{script_source} line {transpose.line}" if transpose else
             case.source("deploy.train.layout"),
             "locations": at(script_source, transpose.line) if transpose else
             case_key(case, "deploy.train.layout")}]


def nv12_side_even(size: int) -> bool:
    """An NV12 height or width must be even: the UV plane is h/2 × w/2 (knowledge.md §10).
    The audit judges the board's size with it, the intake each side as it is typed."""
    return size % 2 == 0


def _nv12(case, board, calls, config, config_source) -> list[dict]:
    row = ((config or {}).get("inputs") or [{}])[0]
    nv12 = board.get("color") == "nv12" or any(
        c.name == "insert_image_convert" and str(c.args.get("mode", "")).lower() == "nv12" for c in calls
    ) or str(row.get("input_type_rt") or "").lower() == "nv12"
    if not nv12:
        return []
    # the NV12 data the board feeds; the training size is not the board's (resizer, crops)
    h, w = board.get("height"), board.get("width")
    source, places = case.source("deploy.board.height"), case_key(case, "deploy.board.height")
    if (h is None or w is None) and _config_size(row):
        # an hb_compile model input fed without a resizer: the NV12 data has its size
        (h, w), source, places = (_config_size(row),
                                  f"{config_source} (input_parameters.input_shape)",
                                  at(config_source))
    known = h is not None and w is not None
    return [{"type": "nv12_size", "height": int(h or 0), "width": int(w or 0), "known": known,
             "even": known and nv12_side_even(h) and nv12_side_even(w), "source": source,
             "locations": places}]


def _board_width(board: dict, config) -> int | None:
    """The width of the image the board feeds: case.yaml's, else the hb_compile input's."""
    if board.get("width") is not None:
        return int(board["width"])
    size = _config_size(((config or {}).get("inputs") or [{}])[0])
    return size[1] if size else None


# J6 image inputs (NV12's Y and UV planes, gray's Y plane) start each row on a 32-byte
# boundary (knowledge.md §10); a row holds one byte per pixel in both planes
STRIDE_ALIGNMENT = 32
YUV_INPUTS = ("nv12", "gray")


def _strides(case, board, calls, config, width) -> list[dict]:
    """The board input's Y / UV row strides (deploy.board.stride / uv_stride) against the
    32-byte alignment and the row they must hold; none for an input that is known not to
    be an image with Y/UV planes (rgb / bgr / yuv444 / featuremap data in memory)."""
    given = [(plane, key) for plane, key in (("Y", "stride"), ("UV", "uv_stride"))
             if board.get(key) is not None]
    if not given:
        return []
    row = ((config or {}).get("inputs") or [{}])[0]
    kinds = {str(board.get("color") or "").lower(),
             str(row.get("input_type_rt") or "").lower()}
    kinds |= {str(c.args.get("mode", "")).lower() for c in calls if c.name == "insert_image_convert"}
    kinds -= {"", "unknown"}
    if kinds and not kinds & set(YUV_INPUTS):
        return []
    if kinds == {"gray"}:
        given = [(plane, key) for plane, key in given if plane == "Y"]     # no UV plane
    facts = []
    for plane, key in given:
        stride = int(board[key])
        aligned = stride % STRIDE_ALIGNMENT == 0
        facts.append({"type": "stride", "plane": plane, "stride": stride,
                      "width": width or 0, "width_known": width is not None,
                      "aligned": aligned, "short": width is not None and stride < width,
                      # the nearest valid stride, for the message: aligned, and
                      # holding the row when the width is known
                      "aligned_stride": -(-max(stride, width or 0) // STRIDE_ALIGNMENT)
                      * STRIDE_ALIGNMENT,
                      "source": case.source(f"deploy.board.{key}"),
                      "locations": case_key(case, f"deploy.board.{key}")})
    return facts


def _export_state(case, calls, script_source) -> list[dict]:
    """The fake-quant state the script exports in (knowledge.md §5 user-side facts):
    case.yaml's fake_quant_state, when it states one, wins; the fact says whether the two
    agree, and cites both."""
    found = export_state(calls) if script_source else None
    if found is None or found.state is UNKNOWN:
        return []
    given = case.get("fake_quant_state", "unknown")
    source = f"{script_source} line {found.set_line}"
    places = joined(at(script_source, found.set_line), at(script_source, found.export_line))
    if given != "unknown":
        source = f"{source}; {case.source('fake_quant_state')}"
        places = joined(places, case_key(case, "fake_quant_state"))
    return [{"type": "export_state", "state": found.state, "case_state": given,
             "agrees": "unknown" if given == "unknown" else
             ("yes" if given == found.state else "no"),
             "set_line": found.set_line, "export_line": found.export_line,
             "export_call": found.export_call, "source": source, "locations": places}]


def _config_size(row: dict) -> tuple[int, int] | None:
    """(height, width) of an hb_compile input_shape in its input_layout_train; None when
    the layout is not stated or a resizer scales the data to the model's size."""
    if str(row.get("input_source") or "").lower() == "resizer":
        return None
    dims = [int(d) for d in re.findall(r"\d+", str(row.get("input_shape") or ""))]
    layout = str(row.get("input_layout_train") or "").upper()
    if len(dims) != 4 or layout not in ("NCHW", "NHWC"):
        return None
    return (dims[2], dims[3]) if layout == "NCHW" else (dims[1], dims[2])


def _input_types(config, config_source) -> list[dict]:
    if not config:
        return []
    facts = []
    for i, row in enumerate(config["inputs"]):
        if not (row.get("input_type_train") or row.get("input_type_rt")):
            continue          # says nothing about the types: case.yaml's colours may
        facts.append({"type": "input_types", "index": i,
                      "train": (row.get("input_type_train") or "unknown").lower(),
                      "rt": (row.get("input_type_rt") or "unknown").lower(),
                      "input_source": (row.get("input_source") or "unknown").lower(),
                      "source": f"{config_source} (input_parameters, input {i})",
                      "locations": at(config_source)})
    return facts


def _declared_input_types(case, train, board, calls, script_source) -> list[dict]:
    """Without an hb_compile config, case.yaml's colours and input source say the same;
    the runtime type may also come from the script's insert_image_convert (nv12, gray)."""
    rt = board.get("color")
    rt_source, rt_places = case.source("deploy.board.color"), case_key(case, "deploy.board.color")
    convert = _last(calls, "insert_image_convert")
    mode = convert.args.get("mode") if convert else None
    if not rt and isinstance(mode, str) and mode.lower() in ("nv12", "gray"):
        rt = mode.lower()
        rt_source, rt_places = (f"{script_source} line {convert.line}",
                                at(script_source, convert.line))
    if not (train.get("color") and rt):
        return []
    return [{"type": "input_types", "index": 0, "train": train["color"], "rt": rt,
             "input_source": board.get("input_source", "unknown"),
             "source": f"{case.source('deploy.train.color')}; {rt_source}",
             "locations": joined(case_key(case, "deploy.train.color"), rt_places)}]


def _core_num(config, calls, platform, config_source, script_source) -> list[dict]:
    compile_ = _last(calls, "compile")
    core = (config or {}).get("core_num")
    source, places = config_source, at(config_source)
    if core is None and compile_ is not None:
        value = compile_.args.get("core_num")
        core = value if isinstance(value, int) and not isinstance(value, bool) \
            and 0 < value < 1000 else None
        source = f"{script_source} line {compile_.line}"
        places = at(script_source, compile_.line)
    march = platform.get("march", "unknown")
    if core is None:
        return []
    return [{"type": "core_num", "march": march, "core_num": int(core), "source": source,
             "locations": places}]
