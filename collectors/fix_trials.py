"""fix_trials.yaml: the remedies ``qcdoctor probe --try-fixes`` applied to a copy of the
analysis model, and how much of the model output's error each one removed (schema
``qcdoctor/fix-trials-v1``, written beside the probe's compare_per_layer_out and
probe_run.yaml).

The file is read whole or not at all: every key and type is checked, and a file with a
problem is refused with the keys named (an ``artifact_problem`` of the folder's reading,
never a traceback), since a trial left out would change what "no single layer reaches the
target" means. A schema other than v1 is refused with what to do about it.

What the rules read: one ``fix_trials`` fact per file (the target, the best trials, the
greedy set, the caveats) and one ``fix_trial`` fact per trial, best first (at most
``TRIAL_FACTS``). The whole file, trials and candidates included, goes to the report's
``fix_trials`` section as a ``fix_trials_series`` record, kept apart from the facts as the
plot series are (collectors/series.py).
"""

from __future__ import annotations

import math
from functools import lru_cache
from pathlib import Path

from qcdoctor.collectors.bounded_data import MAX_DIGITS
from qcdoctor.collectors.key_checks import Failed as _Bad
from qcdoctor.collectors.key_checks import KeyChecks as _Reading
from qcdoctor.collectors.key_checks import TooLarge
from qcdoctor.collectors.key_checks import shown_value as _shown
from qcdoctor.collectors.reasons import joined, reason, with_fix
from qcdoctor.fact_types import (
    DEPLOYABLE_FIXES,
    FACT_TYPES,
    FIX_KINDS,
    FIX_METRICS,
    FIX_TRIALS_SCHEMA,
    LAYER_SEPARATOR,
)
from qcdoctor.source_locations import at

SCHEMA = FIX_TRIALS_SCHEMA
CAVEATS = ("one_input", "fake_quant_only")
SERIES_TYPE = "fix_trials_series"
TRIAL_FACTS = 50            # fix_trial facts per file (the report's section has them all)
SHOWN_PROBLEMS = 3          # problems of one file named in its artifact problem
# the keys of the file and of one trial or greedy set; greedy, notes and before may be
# left out or null
_TOP = ("schema", "metric", "output", "before", "target", "budget", "forwards", "candidates",
        "trials", "greedy", "notes", "caveats", "before_postprocess", "samples", "clean")
# before is null when the analysis model's output gave no finite figure (its notes say so);
# clean: the clean model's figure, where a probe over many samples measured it
_OPTIONAL = ("greedy", "notes", "before", "before_postprocess", "samples", "clean")
# samples: a probe over many samples measured the trials on its worst ones and confirmed
# the recommended fix on every sample (or says why not)
_SAMPLES = ("count", "measured_on", "confirmed", "not_confirmed")
_CONFIRMED = ("samples", "forwards", "median_error_removed", "improved_share", "worst_after",
              "over")
NOT_CONFIRMED = ("no_fix", "one_pass")
# before_postprocess (knowledge.md R5.4): the model contains post-processing, and every
# figure was taken on the tensors entering it (entries: the rows producing them)
_BEFORE_POSTPROCESS = ("entries", "region_rows")
_TRIAL = ("fix", "layers", "after", "error_removed", "forwards", "settings")
_GREEDY = (*_TRIAL, "reached", "ranked")
# what a trial set, quantizer by quantizer (files written before it have none)
_SETTING = ("quantizer", "setting", "scale", "zero_point", "quant_min", "quant_max", "ch_axis",
            "threshold")
SETTINGS = ("int16", "fixed_scale", "per_channel", "off")
_TARGET = ("error_removed", "cosine")
# the values a model-output metric can take: Cosine is a similarity, L1 and MSE errors
_METRIC_RANGE = {"Cosine": (-1.0, 1.0), "L1": (0.0, math.inf), "MSE": (0.0, math.inf)}


def read_fix_trials(data) -> dict:
    """The checked content of a fix_trials.yaml (decoded YAML): the top-level keys, trials
    best first. ValueError with every problem (each naming its key) otherwise."""
    if not isinstance(data, dict):
        raise ValueError(reason("the file holds no mapping of keys (schema {schema} expected)",
                                schema=SCHEMA))
    if data.get("schema") != SCHEMA:
        # another version may mean something else by the same keys: nothing else is read
        problem = reason("schema is missing ({schema} expected)", schema=SCHEMA) \
            if "schema" not in data else \
            reason("schema: {found} is not {schema}", found=_shown(data["schema"]),
                   schema=SCHEMA)
        raise ValueError(with_fix(
            problem,
            reason("this qcdoctor reads {schema}: run qcdoctor probe --try-fixes of this "
                   "version again, or update qcdoctor to the version that wrote the file",
                   schema=SCHEMA)))
    r = _Reading()
    r.mapping(data, "", _TOP, _OPTIONAL)
    metric = r.field(data, "metric", "", r.choice, FIX_METRICS)
    low, high = _METRIC_RANGE.get(metric, (-math.inf, math.inf))

    def trial(item, key, keys=_TRIAL):
        return _trial(r, item, key, keys, low, high)

    out = {"schema": SCHEMA, "metric": metric,
           "output": r.field(data, "output", "", r.text),
           "before": r.field(data, "before", "", r.number, low, high),
           "target": r.field(data, "target", "", lambda v, k: _target(r, v, k, metric)),
           "budget": r.field(data, "budget", "", r.count),
           "forwards": r.field(data, "forwards", "", r.count),
           "candidates": r.field(data, "candidates", "", r.items, r.layer) or [],
           "trials": r.field(data, "trials", "", r.items, trial) or [],
           "greedy": r.field(data, "greedy", "", trial, _GREEDY),
           "notes": r.field(data, "notes", "", r.items, r.text) or [],
           "caveats": r.field(data, "caveats", "", r.items,
                              lambda item, key: r.choice(item, key, CAVEATS)) or [],
           "before_postprocess": r.field(data, "before_postprocess", "",
                                         lambda v, k: _before_postprocess(r, v, k)),
           "samples": r.field(data, "samples", "", lambda v, k: _samples(r, v, k, metric)),
           "clean": r.field(data, "clean", "", r.number, low, high)}
    if r.problems:
        listed = r.problems[:SHOWN_PROBLEMS]
        if len(r.problems) > SHOWN_PROBLEMS:
            listed.append(reason("and {count} more", count=len(r.problems) - SHOWN_PROBLEMS))
        raise ValueError(joined(listed))
    # best first, whatever order the file lists them in: most error removed, fewer layers
    out["trials"].sort(key=lambda t: (-t["error_removed"], len(t["layers"])))
    out["caveats"] = list(dict.fromkeys(out["caveats"]))
    return out


def _before_postprocess(r: _Reading, value, key: str) -> dict:
    r.mapping(value, key, _BEFORE_POSTPROCESS)
    return {"entries": r.field(value, "entries", key,
                               lambda v, k: r.items(v, k, r.layer, empty=False)) or [],
            "region_rows": r.field(value, "region_rows", key, r.count) or 0}


def _samples(r: _Reading, value, key: str, metric: str | None) -> dict:
    """Which samples the trials measured (each below ``count``), and the confirmation on
    every sample, or why there is none."""
    r.mapping(value, key, _SAMPLES, ("confirmed", "not_confirmed"))
    count = r.field(value, "count", key, r.count) or 0
    measured = r.field(value, "measured_on", key, lambda v, k: r.items(
        v, k, lambda x, xk: _index(r, x, xk, count), empty=False)) or []
    confirmed = r.field(value, "confirmed", key, lambda v, k: _confirmed(r, v, k, metric, count))
    not_confirmed = r.field(value, "not_confirmed", key, r.choice, NOT_CONFIRMED)
    if (confirmed is None) == (not_confirmed is None) and value.get("confirmed") is None:
        r.fail(reason("{key}: either confirmed or not_confirmed (why not)", key=key))
    return {"count": count, "measured_on": measured, "confirmed": confirmed,
            "not_confirmed": not_confirmed}


def _index(r: _Reading, value, key: str, count: int) -> int:
    index = r.count(value, key)
    if index >= count:
        r.fail(reason("{key}: sample {index} is past the {count} samples", key=key,
                      index=index, count=count))
    return index


def _confirmed(r: _Reading, value, key: str, metric: str | None, count: int) -> dict:
    # over: the samples the median and the share are of (those that show the error, where
    # the clean model's error was measured); files written before it have none (all)
    r.mapping(value, key, _CONFIRMED, ("median_error_removed", "worst_after", "over"))
    out = {"samples": r.field(value, "samples", key, r.count),
           "forwards": r.field(value, "forwards", key, r.count),
           # below 0 the fix made the median sample worse
           "median_error_removed": r.field(value, "median_error_removed", key, r.number,
                                           -math.inf, 1.0),
           "improved_share": r.field(value, "improved_share", key, r.number, 0.0, 1.0),
           "over": r.field(value, "over", key, r.count),
           "worst_after": None}
    worst = value.get("worst_after")
    if worst is not None:
        r.mapping(worst, f"{key}.worst_after", ("sample", metric or "Cosine"),
                  (metric or "Cosine",))
        low, high = _METRIC_RANGE.get(metric, (-math.inf, math.inf))
        out["worst_after"] = {
            "sample": r.field(worst, "sample", f"{key}.worst_after",
                              lambda v, k: _index(r, v, k, count)),
            "value": r.field(worst, metric or "Cosine", f"{key}.worst_after", r.number,
                             low, high)}
    if out["samples"] is not None and out["samples"] != count:
        r.fail(reason("{key}.samples: {found}, not the {count} samples searched",
                      key=key, found=out["samples"], count=count))
    return out


def _target(r: _Reading, value, key: str, metric: str | None) -> dict:
    r.mapping(value, key, _TARGET, ("cosine",))
    target = {"error_removed": r.field(value, "error_removed", key, r.number, 0.0, 1.0)}
    if value.get("cosine") is not None and metric not in (None, "Cosine"):
        r.fail(reason("{key}: given, but the metric is {metric}", key=f"{key}.cosine",
                      metric=_shown(metric)))
    cosine = r.field(value, "cosine", key, r.number, -1.0, 1.0)
    if cosine is not None:
        target["cosine"] = cosine
    return target


def _trial(r: _Reading, value, key: str, keys: tuple, low: float, high: float) -> dict:
    problems = len(r.problems)
    r.mapping(value, key, keys, ("settings", "ranked"))
    # a trial is of one layer or more; the greedy set may come out empty
    trial = {"fix": r.field(value, "fix", key, r.choice, FIX_KINDS),
             "layers": r.field(value, "layers", key,
                               lambda v, k: r.items(v, k, r.layer, empty=key == "greedy")),
             "after": r.field(value, "after", key, r.number, low, high),
             # 1 - after_error / before_error: at most 1; below 0 the fix made it worse
             "error_removed": r.field(value, "error_removed", key, r.number, -math.inf, 1.0),
             "forwards": r.field(value, "forwards", key, r.count)}
    if "reached" in keys:
        trial["reached"] = r.field(value, "reached", key, r.flag)
    if "ranked" in keys and value.get("ranked") is not None:
        # the layers the set search ranked (files written before it was a bisection lack it)
        trial["ranked"] = r.field(value, "ranked", key, r.count)
    if isinstance(value, dict) and value.get("settings") is not None:
        trial["settings"] = r.field(value, "settings", key, lambda v, k: r.items(
            v, k, lambda s, sk: _setting(r, s, sk))) or []
    if len(r.problems) > problems:
        raise _Bad
    return trial


def _setting(r: _Reading, value, key: str) -> dict:
    """One quantizer's setting: switched off, or fixed qparams (as many zero points as
    scales, each scale above zero, over quant_min < quant_max)."""
    r.mapping(value, key, _SETTING, _SETTING[2:])
    out = {"quantizer": r.field(value, "quantizer", key, r.text),
           "setting": r.field(value, "setting", key, r.choice, SETTINGS)}
    if out["setting"] in (None, "off") or value.get("scale") is None:
        return out
    out["scale"] = r.field(value, "scale", key, lambda v, k: r.items(
        v, k, lambda x, xk: r.number(x, xk, 0.0), empty=False)) or []
    out["zero_point"] = r.field(value, "zero_point", key,
                                lambda v, k: r.items(v, k, r.integer, empty=False)) or []
    out["quant_min"] = r.field(value, "quant_min", key, r.integer)
    out["quant_max"] = r.field(value, "quant_max", key, r.integer)
    out["ch_axis"] = r.field(value, "ch_axis", key, r.count)
    if value.get("threshold") is not None:
        out["threshold"] = r.field(value, "threshold", key, r.number, 0.0)
    if len(out["scale"]) != len(out["zero_point"]) or 0 in out["scale"]:
        r.fail(reason("{key}: as many zero points as scales, every scale above 0", key=key))
    if None in (out["quant_min"], out["quant_max"]) or out["quant_min"] >= out["quant_max"]:
        r.fail(reason("{key}: quant_min below quant_max", key=key))
    return out



def within_target(before: float | None, target: dict, metric: str) -> bool:
    """Whether the analysis model's output meets the target before any fix (no error, or a
    Cosine at least the target's): then no trial is a remedy of anything."""
    if before is None:
        return False
    if metric == "Cosine":
        return before >= 1.0 or ("cosine" in target and before >= target["cosine"])
    return before <= 0.0


def reaches(trial: dict, target: dict, metric: str, before: float | None = None) -> bool:
    """Whether a trial meets the target: at least the error share to remove, or - a Cosine
    target given - an output Cosine at least that high; never when the output met the
    target before any fix (``before``)."""
    if within_target(before, target, metric):
        return False
    if trial["error_removed"] >= target["error_removed"]:
        return True
    return metric == "Cosine" and "cosine" in target and trial["after"] >= target["cosine"]


def _names(layers: list[str]) -> str:
    return LAYER_SEPARATOR.join(layers)


def fix_trial_facts(content: dict, analysis: str, source: str) -> list[dict]:
    """The facts of one checked file (``read_fix_trials``) of the folder ``analysis``:
    the summary, its trials (best first) and the report's record of the whole file."""
    trials, target, metric = content["trials"], content["target"], content["metric"]
    before = content["before"]

    def met(trial: dict) -> bool:
        return reaches(trial, target, metric, before)

    places = at(source)
    deployable = [t for t in trials if t["fix"] in DEPLOYABLE_FIXES]
    best = deployable[0] if deployable else None
    single = next((t for t in deployable if len(t["layers"]) == 1), None)
    upper = next((t for t in trials if t["fix"] == "float"), None)
    greedy = content["greedy"]
    # every field given (a report's facts carry each field of their type): the trials a
    # file lacks leave their fields at the defaults
    summary = {name: spec.default for name, spec in FACT_TYPES["fix_trials"].items()}
    summary.update({
        "type": "fix_trials", "analysis": analysis, "metric": metric,
        "output": content["output"], "before": 0.0 if before is None else before,
        "before_known": before is not None, "within_target": within_target(before, target, metric),
        "target_removed": target["error_removed"], "target_cosine": target.get("cosine", 0.0),
        "cosine_target": "cosine" in target, "budget": content["budget"],
        "forwards": content["forwards"], "candidates": len(content["candidates"]),
        "trials": len(trials), "notes": len(content["notes"]), "measured": best is not None,
        "single_tried": single is not None,
        "single_reaches": single is not None and met(single),
        "greedy": greedy is not None, "float_tried": upper is not None,
        "one_input": "one_input" in content["caveats"],
        "fake_quant_only": "fake_quant_only" in content["caveats"],
        # R5.3: the probe found the two models differ beyond quantization (its note)
        "models_differ": any(str(note).startswith("models_differ:")
                             for note in content["notes"]),
        "source": source, "locations": places})
    searched = content.get("samples")
    if searched is not None:
        confirmed = searched["confirmed"] or {}
        worst = confirmed.get("worst_after") or {}
        summary.update({
            "samples": searched["count"], "measured_on": len(searched["measured_on"]),
            "confirmed": bool(confirmed), "not_confirmed": searched["not_confirmed"] or "",
            "confirmed_removed": _or_zero(confirmed.get("median_error_removed")),
            "improved_share": _or_zero(confirmed.get("improved_share")),
            # the samples the median and the share are of: those showing the error where
            # the clean model's error was measured, else all
            "confirmed_over": confirmed.get("over") or searched["count"],
            "worst_after_sample": -1 if worst.get("sample") is None else worst["sample"],
            "worst_after": _or_zero(worst.get("value")),
            # on the median sample the fix removes the target's share of the error
            "confirmed_reaches": confirmed.get("median_error_removed") is not None and
            confirmed["median_error_removed"] >= target["error_removed"]})
    postprocess = content.get("before_postprocess")
    if postprocess is not None:
        summary.update({"before_postprocess": True,
                        "postprocess_entries": _names(postprocess["entries"]),
                        "postprocess_rows": postprocess["region_rows"]})
    for prefix, trial in (("best", best), ("single", single), ("float", upper)):
        if trial is not None:
            summary.update({f"{prefix}_after": trial["after"],
                            f"{prefix}_removed": trial["error_removed"]})
            if prefix != "float":
                summary[f"{prefix}_fix"] = trial["fix"]
    # only where the budget did end the search is it the reason (R4.4)
    summary["budget_spent"] = content["forwards"] >= content["budget"] or any(
        str(note).startswith("budget_spent") for note in content["notes"])
    summary["float_best"] = upper is not None and (
        best is None or upper["error_removed"] >= best["error_removed"])
    if best is not None:
        summary["best_layers"] = _names(best["layers"])
    if single is not None:
        summary["single_layer"] = single["layers"][0]
        # a fixed scale's threshold as measured (the range it covers), for the fix's code
        fixed = next((s for s in single.get("settings", []) if "threshold" in s), None)
        if fixed is not None:
            summary["single_threshold"] = f"{fixed['threshold']:.7g}"
            # its qparams, for fix code that sets them as measured (torch.ao's)
            summary["single_qparams"] = (f"{fixed['scale'][0]!r},{fixed['zero_point'][0]},"
                                         f"{fixed['quant_min']},{fixed['quant_max']}")
    if upper is not None:
        summary["float_layers"] = _names(upper["layers"])
    if greedy is not None:
        summary.update({"greedy_fix": greedy["fix"], "greedy_layers": _names(greedy["layers"]),
                        "greedy_size": len(greedy["layers"]), "greedy_after": greedy["after"],
                        "greedy_removed": greedy["error_removed"],
                        "greedy_forwards": greedy["forwards"],
                        # an empty set reaches nothing one could apply, nor a set of a
                        # model that met the target before any fix
                        "greedy_reached": greedy["reached"] and bool(greedy["layers"])
                        and not summary["within_target"],
                        "greedy_deployable": greedy["fix"] in DEPLOYABLE_FIXES})
    summary["reached"] = summary["single_reaches"] or (
        summary["greedy_reached"] and summary["greedy_deployable"])
    facts = [summary]
    facts += [{"type": "fix_trial", "analysis": analysis, "rank": i, "fix": t["fix"],
               "layers": _names(t["layers"]), "layer_count": len(t["layers"]),
               "after": t["after"], "error_removed": t["error_removed"],
               "forwards": t["forwards"], "reaches": met(t),
               "deployable": t["fix"] in DEPLOYABLE_FIXES,
               "source": source, "locations": places}
              for i, t in enumerate(trials[:TRIAL_FACTS], 1)]
    record = {"type": SERIES_TYPE, "analysis": analysis, "source": source,
              # the report's record keeps its own keys (the before_postprocess fields are
              # the summary fact's)
              **{k: v for k, v in content.items()
                 if k not in ("trials", "before_postprocess", "samples", "clean")},
              "trials": [{**t, "reaches": met(t)} for t in trials]}
    return facts + [record]


def _or_zero(value) -> float:
    """A figure the file leaves null (no finite figure): 0, as the fact's default."""
    return 0.0 if value is None else float(value)


def load_fix_trials(path, analysis: str, source: str) -> list[dict]:
    """The facts of the fix_trials.yaml at ``path`` (``source``: its path in the case
    folder). QcdoctorError when it is not YAML, ValueError naming every problem else."""
    return fix_trial_facts(read_fix_trials_file(path, source), analysis, source)


def read_fix_trials_file(path, source: str) -> dict:
    """The checked content of the fix_trials.yaml at ``path``, read within the case files'
    YAML limits (``source``: the path messages name). QcdoctorError when it is not YAML,
    ValueError naming every problem else."""
    from qcdoctor.collectors.yaml_schema import load_document
    data, _ = load_document(Path(path).read_text(encoding="utf-8"), source, _document())
    return read_fix_trials(data)


def _decoded_int(constructor, node):
    """An integer as PyYAML reads it, or TooLarge past ``MAX_DIGITS`` digits (counted on
    the text: converting it is what fails)."""
    if node.value.lstrip("+-").startswith(("0x", "0b", "0o")) or ":" in node.value:
        value = constructor.construct_yaml_int(node)     # no digit limit in those bases
        if abs(value) < 10 ** MAX_DIGITS:
            return value
        return TooLarge(node.value, math.floor(abs(value).bit_length() * math.log10(2)) + 1)
    digits = sum(c.isdigit() for c in node.value.lstrip("+-0"))
    return TooLarge(node.value, digits) if digits > MAX_DIGITS else \
        constructor.construct_yaml_int(node)


@lru_cache(maxsize=1)
def _document():
    """A reader of the whole file as PyYAML's safe loader reads it (composed within the
    limits of yaml_schema), its over-long integers as TooLarge."""
    import yaml

    from qcdoctor.collectors.yaml_schema import Spec

    class Constructor(yaml.constructor.SafeConstructor):
        pass
    Constructor.add_constructor("tag:yaml.org,2002:int", _decoded_int)

    class Document(Spec):
        doc = "fix_trials.yaml"

        def read(self, node, key, ctx):
            try:
                return Constructor().construct_document(node)
            except (yaml.YAMLError, ValueError) as exc:     # an unhashable key, a bad date
                ctx.fail(node, key, f"not valid YAML: {getattr(exc, 'problem', None) or exc}",
                         "check indentation and quoting around this line")
    return Document()
