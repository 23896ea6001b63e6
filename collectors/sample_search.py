"""The probe's bad-case search, as triage reads it: probe_run.yaml's ``samples`` (what the
search chose and how widespread the error is), checked key by key, and sample_errors.csv
(collectors/sample_errors.py), checked against it, into one ``sample_search`` fact and the
report's plot series of the chosen output's per-sample Cosine.

A ``samples`` mapping with a key of the wrong kind, or two files of different searches,
is refused naming the key (collectors/quant_analysis.py turns the refusal into an
``artifact_problem``): a figure read wrong would state a bad case that is not there.
"""

from __future__ import annotations

import math
from array import array

from qcdoctor.collectors.key_checks import Failed, KeyChecks, shown_value
from qcdoctor.collectors.reasons import joined, reason
from qcdoctor.collectors.sample_errors import SampleErrors
from qcdoctor.fact_types import SAMPLE_CHOSEN_BY, SAMPLE_METRICS
from qcdoctor.source_locations import at
from qcdoctor.source_locations import joined as joined_places

SERIES_TYPE = "sample_series"
# points of the plot's sorted Cosine curve: every sample up to this many, else this many
# spread evenly over the sorted order (the worst, the best and the chosen sample always)
SERIES_POINTS = 200
_KEY = "samples"
_KEYS = ("count", "metric", "tolerance_cosine", "chosen", "chosen_by", "output", "rank",
         "shown_on", "below_tolerance", "rounding_factor", "spread", "outputs", "kept_worst",
         "replayable")
# written by later probes only: a search without them counts its samples below the
# tolerance as showing the error (no clean model's error measured)
_LATER = ("below_tolerance", "rounding_factor")
_OUTPUT_KEYS = ("worst", "worst_value", "median_cosine", "shown_on")


# --- probe_run.yaml's samples ------------------------------------------------------------

def read_samples(value) -> dict:
    """The checked ``samples`` mapping: its keys (others, a later probe's, are let be) and
    each output's entry. ValueError naming every key at fault (the first three)."""
    r = KeyChecks()
    try:
        r.mapping(value, _KEY, _KEYS, ("kept_worst", *_LATER), strict=False)
    except Failed:
        raise ValueError(joined(r.problems)) from None

    def field(name, reader, *args):
        return r.field(value, name, _KEY, reader, *args)
    out = {"count": field("count", r.count), "metric": field("metric", r.choice, SAMPLE_METRICS),
           "tolerance_cosine": field("tolerance_cosine", r.number, -1.0, 1.0),
           "chosen": field("chosen", r.count),
           "chosen_by": field("chosen_by", r.choice, SAMPLE_CHOSEN_BY),
           "output": field("output", r.text), "rank": field("rank", r.count),
           "shown_on": field("shown_on", r.count),
           "below_tolerance": field("below_tolerance", r.count),
           "rounding_factor": field("rounding_factor", r.number, 1.0, math.inf),
           "spread": field("spread", r.flag),
           "outputs": field("outputs", lambda v, k: _outputs(r, v, k)),
           "kept_worst": field("kept_worst", r.items, r.count) or [],
           "replayable": field("replayable", r.flag)}
    if not r.problems:
        _agree(r, out)
    if r.problems:
        shown = r.problems[:3]
        if len(r.problems) > 3:
            shown.append(reason("and {count} more", count=len(r.problems) - 3))
        raise ValueError(joined(shown))
    return out


def _outputs(r: KeyChecks, value, key: str) -> dict[str, dict]:
    """Each output's entry, by its name (YAML reads an unquoted 0 as a number)."""
    if not isinstance(value, dict) or not value:
        r.fail(reason("{key}: expected a mapping of outputs, found {found}", key=key,
                      found=shown_value(value)))
    out = {}
    for name, entry in value.items():
        at_key = f"{key}.{name}"
        try:
            r.mapping(entry, at_key, _OUTPUT_KEYS, ("worst_value", "median_cosine"),
                      strict=False)
        except Failed:
            continue
        out[str(name)] = {
            "worst": r.field(entry, "worst", at_key, r.count),
            "worst_value": r.field(entry, "worst_value", at_key, r.number),
            "median_cosine": r.field(entry, "median_cosine", at_key, r.number, -1.0, 1.0),
            "shown_on": r.field(entry, "shown_on", at_key, r.count)}
    return out


def _agree(r: KeyChecks, s: dict) -> None:
    """The keys against each other: indices within the samples, the chosen output listed,
    the worst sample chosen where the search chose the worst."""
    count = s["count"]
    problems = r.problems
    if count == 0:
        problems.append(reason("{key}: no sample searched", key="samples.count"))
        return
    last = count - 1
    for key, value in (("chosen", s["chosen"]), *((f"outputs.{name}.worst", entry["worst"])
                                                  for name, entry in s["outputs"].items())):
        if value > last:
            problems.append(reason("{key}: sample {value} is past the last one ({last})",
                                   key=f"samples.{key}", value=value, last=last))
    below = s["below_tolerance"]
    for key, value in (("rank", s["rank"]), ("shown_on", s["shown_on"]),
                       ("below_tolerance", below or 0)):
        if value > count or (key == "rank" and value < 1):
            problems.append(reason("{key}: {value} is outside {low} to {high}",
                                   key=f"samples.{key}", value=value, low=int(key == "rank"),
                                   high=count))
    if below is not None and below < s["shown_on"] <= count:
        problems.append(reason("{key}: {value} is less than samples.shown_on ({total})",
                               key="samples.below_tolerance", value=below,
                               total=s["shown_on"]))
    for name, entry in s["outputs"].items():
        if entry["shown_on"] > s["shown_on"]:
            problems.append(reason("{key}: {value} is more than samples.shown_on ({total})",
                                   key=f"samples.outputs.{name}.shown_on",
                                   value=entry["shown_on"], total=s["shown_on"]))
    chosen = s["outputs"].get(s["output"])
    if chosen is None:
        problems.append(reason("{key}: {value} is not one of {allowed}", key="samples.output",
                               value=shown_value(s["output"]),
                               allowed=", ".join(s["outputs"])))
    elif s["chosen_by"] == "worst" and (s["chosen"] != chosen["worst"] or s["rank"] != 1):
        problems.append(reason("{key}: sample {chosen} of rank {rank}, where the worst of "
                               "output {output} is sample {worst} (rank 1)",
                               key="samples.chosen", chosen=s["chosen"], rank=s["rank"],
                               output=s["output"], worst=chosen["worst"]))


# --- the fact and the series --------------------------------------------------------------

def search_facts(samples: dict, errors: SampleErrors | None, analysis: str, manifest: str,
                 errors_file: str) -> list[dict]:
    """The ``sample_search`` fact of one folder, and the plot series where sample_errors.csv
    was read (``errors``); ValueError naming the key where the two files disagree."""
    output = samples["output"]
    entry = samples["outputs"][output]
    fact = {"type": "sample_search", "analysis": analysis, "count": samples["count"],
            "metric": samples["metric"], "tolerance_cosine": samples["tolerance_cosine"],
            "chosen": samples["chosen"], "chosen_by": samples["chosen_by"], "output": output,
            "rank": samples["rank"], "metric_worst": entry["worst"],
            "shown_on": samples["shown_on"],
            "shown": _shown_share(samples["shown_on"], samples["count"]),
            # the clean model's error measured: samples below the tolerance but within it
            # do not show the error
            "below_tolerance": samples["shown_on"] if samples["below_tolerance"] is None
            else samples["below_tolerance"],
            "rounding_known": samples["rounding_factor"] is not None,
            "rounding_factor": samples["rounding_factor"] or 0.0,
            "spread": samples["spread"], "outputs": len(samples["outputs"]),
            "kept": len(samples["kept_worst"]), "replayable": samples["replayable"],
            "source": f"{manifest} ({_KEY})", "locations": at(manifest)}
    if errors is None:
        # the manifest gives the median; the worst Cosine only where Cosine chose the worst
        median, worst = entry["median_cosine"], entry["worst_value"]
        by_cosine = samples["metric"] == "Cosine" and worst is not None
        fact.update(median_cosine=median or 0.0, median_known=median is not None,
                    worst_cosine=worst if by_cosine else 0.0, worst_known=by_cosine,
                    worst_sample=entry["worst"] if by_cosine else -1, nonfinite=0,
                    chosen_cosine=0.0, chosen_known=False, chosen_shows="unknown",
                    cosines_from="manifest")
        return [fact]
    _check_same_run(samples, errors)
    order, finite = _sorted(errors.cosines)
    values = [errors.cosines[i] for i in order]
    median = _median(values)
    fact.update(median_cosine=median if median is not None else 0.0,
                median_known=median is not None,
                worst_cosine=values[0] if values else 0.0, worst_known=bool(values),
                worst_sample=order[0] if values else -1,
                nonfinite=len(errors.cosines) - finite, cosines_from="sample_errors",
                chosen_cosine=_finite(errors.cosines[samples["chosen"]]),
                chosen_known=math.isfinite(errors.cosines[samples["chosen"]]),
                chosen_shows="yes" if errors.chosen_shown else "no",
                source=f"{manifest} ({_KEY}); {errors_file}",
                locations=joined_places(at(manifest), at(errors_file)))
    shown_here = errors.shown_per_output[errors.outputs.index(output)]
    return [fact, _series(fact, errors.cosines, order, shown_here, errors_file)]


def _finite(value: float) -> float:
    """A fact's number: a value that is none is 0 (its *_known flag says so)."""
    return value if math.isfinite(value) else 0.0


def _shown_share(shown_on: int, count: int) -> str:
    return "none" if shown_on == 0 else "all" if shown_on >= count else "some"


def _check_same_run(samples: dict, errors: SampleErrors) -> None:
    """sample_errors.csv and probe_run.yaml of one search: the same outputs, samples and
    samples showing the error; ValueError naming the key that differs."""
    if sorted(errors.outputs) != sorted(samples["outputs"]):
        raise ValueError(reason("its outputs ({found}) are not those of probe_run.yaml's "
                                "samples.outputs ({expected}): the two files are not of one "
                                "search", found=", ".join(errors.outputs[:10]),
                                expected=", ".join(list(samples["outputs"])[:10])))
    counts = [("samples.count", errors.count, samples["count"]),
              ("samples.shown_on", errors.shown_on, samples["shown_on"])]
    counts += [(f"samples.outputs.{name}.shown_on",
                errors.shown_per_output[errors.outputs.index(name)], entry["shown_on"])
               for name, entry in samples["outputs"].items()]
    for key, found, expected in counts:
        if found != expected:
            raise ValueError(reason("it gives {found} where probe_run.yaml's {key} gives "
                                    "{expected}: the two files are not of one search",
                                    found=found, key=key, expected=expected))


def _sorted(cosines: array) -> tuple[list[int], int]:
    """The samples with a finite Cosine, worst first (the first of equals first), and how
    many there are."""
    import numpy as np
    values = np.frombuffer(cosines, dtype=float)
    finite = np.flatnonzero(np.isfinite(values))
    order = finite[np.argsort(values[finite], kind="stable")]
    return order.tolist(), int(finite.size)


def _median(values: list[float]) -> float | None:
    """The median of sorted values, as the probe computes it (None for none)."""
    if not values:
        return None
    middle = len(values) // 2
    return values[middle] if len(values) % 2 else (values[middle - 1] + values[middle]) / 2


def _series(fact: dict, cosines: array, order: list[int], shown_here: int,
            source: str) -> dict:
    """The plot's data: the chosen output's Cosine per sample, sorted worst first, every
    sample or ``SERIES_POINTS`` of them (the worst, the best, the chosen one kept)."""
    chosen = fact["chosen"]
    chosen_cosine = cosines[chosen]
    # its place in the sorted order (None where its Cosine is no number: not drawn)
    position = order.index(chosen) if math.isfinite(chosen_cosine) else None
    kept = _kept_positions(len(order), position)
    return {"type": SERIES_TYPE, "analysis": fact["analysis"], "source": source,
            "output": fact["output"], "metric": fact["metric"], "count": fact["count"],
            "tolerance": fact["tolerance_cosine"], "shown_on": shown_here,
            "chosen": chosen, "chosen_by": fact["chosen_by"],
            "chosen_cosine": chosen_cosine if math.isfinite(chosen_cosine) else None,
            "chosen_position": position,
            "median": fact["median_cosine"] if fact["median_known"] else None,
            "worst": fact["worst_cosine"] if fact["worst_known"] else None,
            "worst_sample": fact["worst_sample"] if fact["worst_known"] else None,
            "nonfinite": fact["nonfinite"], "decimated": len(kept) < len(order),
            "points": [{"position": p, "sample": order[p], "cosine": cosines[order[p]]}
                       for p in kept]}


def _kept_positions(total: int, chosen: int | None, points: int = SERIES_POINTS) -> list[int]:
    """Positions in the sorted order the plot shows: all of up to ``points``, else that
    many spread evenly from the worst to the best, and the chosen sample's."""
    if total <= points:
        return list(range(total))
    kept = {round(i * (total - 1) / (points - 1)) for i in range(points)}
    if chosen is not None:
        kept.add(chosen)
    return sorted(kept)
