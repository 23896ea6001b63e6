"""``qcdoctor compare LEFT RIGHT``: two tensor dumps (files or folders), output by output,
each judged against a tolerance; ``--fail-on`` turns the verdicts into the exit code."""

from __future__ import annotations

import math
from pathlib import Path

from qcdoctor.engine.commands.options import FAIL_ON
from qcdoctor.errors import EXIT_FINDINGS, EXIT_OK, QcdoctorError
from qcdoctor.vocabulary import SEVERITIES

ABOUT = dict(help="compare two tensor dumps (files or folders of outputs)")

# an output's status -> the level it is reported at (None: nothing to report)
LEVELS = {"identical": None, "within_tolerance": "info", "shape_differs": "warning",
          "beyond_tolerance": "error", "not_finite": "error", "missing": "error",
          "not_comparable": "error"}


def declare(command) -> None:
    command.add_argument("left", help="dump file or folder (.npy, .pt, .bin)")
    command.add_argument("right", help="the reference dump file or folder")
    command.add_argument("--decimals", type=int, default=4,
                         help="values differing beyond this many decimals count as mismatched "
                              "(the mismatch column only)")
    command.add_argument("--atol", type=float, default=0.0, metavar="A",
                         help="an output passes when its max abs error is at most A (default "
                              "0)")
    command.add_argument("--rtol", type=float, default=0.0, metavar="R",
                         help="... or when its rel error (max abs error / the reference's "
                              "largest |value|) is at most R (default 0); with both 0 only "
                              "identical outputs pass")
    command.add_argument("--dtype", default=None,
                         help="dtype of raw .bin files without a sidecar (default float32)")
    command.add_argument("--format", choices=("md", "json"), default="md")
    command.add_argument("--lang", choices=("zh", "en"),
                         help="language of the table and its summary (default: the locale's; "
                              "see docs/reports.md, Language)")
    command.add_argument("--fail-on", choices=FAIL_ON, default="never",
                         help="exit 1 when an output at or above this level is found: error "
                              "(beyond the tolerance, NaN or inf, missing, not comparable), "
                              "warning (shapes differ, values within the tolerance), info "
                              "(not identical, within the tolerance)")
    command.add_argument("--trust-pickles", action="store_true",
                         help="allow .pt dumps that need full unpickling")


def run(args, parser) -> int:
    import json

    from qcdoctor.collectors.dumps import compare_paths
    from qcdoctor.engine.commands.progress import Progress
    from qcdoctor.engine.reports.locale_language import chosen_language
    from qcdoctor.wording import labels
    if not 0 <= args.decimals <= 12:
        raise QcdoctorError("--decimals takes 0 to 12", fix="e.g. --decimals 4")
    for option, value in (("--atol", args.atol), ("--rtol", args.rtol)):
        if not (math.isfinite(value) and value >= 0):
            raise QcdoctorError(f"{value} is not a tolerance", key=option,
                                fix=f"give a number of 0 or more, e.g. {option} 1e-5")
    lang = chosen_language(args.lang)         # no case here: --lang, else the locale
    words = labels()[lang]["compare"]
    results = compare_paths(Path(args.left), Path(args.right), args.decimals, args.dtype,
                            args.trust_pickles, Progress(verb=words["progress"]))
    for r in results:
        r["status"] = status(r, args.atol, args.rtol)
        r["level"] = LEVELS[r["status"]]
    if args.format == "json":
        from qcdoctor.engine.matching.jsonfmt import without_nonfinite
        print(json.dumps([without_nonfinite(r) for r in results], indent=2, default=str,
                         allow_nan=False))
    else:
        print(_markdown(results, args, lang))
    return EXIT_FINDINGS if fails_on(results, args.fail_on) else EXIT_OK


def status(result: dict, atol: float, rtol: float) -> str:
    """What one output's comparison says, a key of LEVELS."""
    if "missing" in result:
        return "missing"
    if result["cosine"] is None:            # sizes differ: nothing was compared
        return "not_comparable"
    if result["nonfinite"]:                 # NaN / inf are left out of the figures
        return "not_finite"
    if result["identical"]:
        return "shape_differs" if result["shape_mismatch"] else "identical"
    # both 0 asks for identical values: 64-bit integers past 2**53 can differ at max abs 0
    tolerant = atol > 0 or rtol > 0
    if not (tolerant and (result["max_abs"] <= atol or result["rel"] <= rtol)):
        return "beyond_tolerance"
    return "shape_differs" if result["shape_mismatch"] else "within_tolerance"


def fails_on(results: list[dict], fail_on: str) -> bool:
    """Whether an output is at or above ``fail_on`` (``never``: no)."""
    if fail_on == "never":
        return False
    return any(r["level"] is not None and SEVERITIES.index(r["level"]) >=
               SEVERITIES.index(fail_on) for r in results)


def _markdown(results: list[dict], args, lang: str) -> str:
    from qcdoctor.text import render as fill
    from qcdoctor.wording import labels
    words = labels()[lang]
    column = words["compare"]["columns"]
    yes, no = words["words"]["value"]["yes"], words["words"]["value"]["no"]
    head = [column["output"], column["cosine"], column["l1"], column["max_abs"], column["rel"],
            fill(column["mismatch"], {"decimals": args.decimals}, lang), column["identical"],
            column["verdict"]]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in results:
        if "cosine" in r and r["cosine"] is not None:
            figures = [f"{r['cosine']:.6f}", f"{r['l1']:.6g}", f"{r['max_abs']:.6g}",
                       f"{r['rel']:.3g}", f"{r['mismatch_ratio']:.4%}",
                       yes if r["identical"] else no]
        else:
            figures = ["", "", "", "", "", "" if "missing" in r else no]
        lines.append(f"| {r['output']} | " + " | ".join(figures) + f" | {_verdict(r, lang)} |")
    tolerance = "tolerance" if args.atol > 0 or args.rtol > 0 else "tolerance_none"
    counts = {level: sum(r["level"] == level for r in results) for level in (None, *SEVERITIES)}
    lines += ["", fill(words["compare"][tolerance], {"atol": f"{args.atol:g}",
                                                      "rtol": f"{args.rtol:g}"}, lang),
              fill(words["compare"]["summary"], {"total": len(results), "identical": counts[None],
                                                 "within": counts["info"],
                                                 "warned": counts["warning"],
                                                 "failed": counts["error"]}, lang)]
    return "\n".join(lines)


def _verdict(result: dict, lang: str) -> str:
    """The status in words, behind its level (none for an identical output)."""
    from qcdoctor.text import render as fill
    from qcdoctor.wording import labels
    words = labels()[lang]
    said = fill(words["compare"]["status"][result["status"]], {
        "side": words["compare"]["sides"].get(result.get("missing"), ""),
        "left": result.get("shape_left"), "right": result.get("shape_right"),
        "count": result.get("nonfinite")}, lang)
    if result["level"] is None:
        return said
    return fill(words["compare"]["verdict"], {"level": words["severity"][result["level"]],
                                              "status": said}, lang)
