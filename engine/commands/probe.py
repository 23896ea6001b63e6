"""``qcdoctor probe``: layer metrics of two torch models, written as QuantAnalysis files
(imports and runs the user's model code; needs torch); with ``--try-fixes``, candidate
remedies measured on a copy of the analysis model (fix_trials.yaml)."""

from __future__ import annotations

import os
import pickle
import re
import sys
import traceback
from contextlib import contextmanager
from pathlib import Path

from qcdoctor.errors import EXIT_OK, QcdoctorError

ABOUT = dict(help="measure layer metrics of two torch models and write them as "
                  "QuantAnalysis files (imports and runs your model code)",
             description="Compare every layer output of two torch models on one input "
                         "and write compare_per_layer_out.{csv,txt}, "
                         "output_*_sensitive_ops.{txt,pt} and probe_run.yaml in the "
                         "profiler's formats; with --try-fixes, also fix_trials.yaml: "
                         "remedies tried on a copy of the analysis model and the output "
                         "error each removes. MOD:ATTR imports MOD (run from its folder "
                         "or set PYTHONPATH): that runs your code, as pytest runs test "
                         "files. Needs torch.")


def declare(command) -> None:
    command.add_argument("--baseline", required=True, metavar="MOD:ATTR|self",
                         help="the reference model, or a function returning it; self: the "
                              "analysis model itself with every fake quant off (the "
                              "quantization error alone, where the two models differ "
                              "beyond quantization)")
    command.add_argument("--analysis", required=True, metavar="MOD:ATTR",
                         help="the model to check (fake-quantized), or a function returning it")
    given = command.add_mutually_exclusive_group(required=True)
    given.add_argument("--inputs", metavar="FILE.pt",
                       help="one forward call's inputs: torch.save'd tensor, tuple/list of "
                            "arguments or dict of keyword arguments (loaded with "
                            "weights_only=True)")
    given.add_argument("--samples", metavar="FILE_OR_DIR",
                       help="many samples, each one call's inputs: a .pt file holding a list "
                            "of them, or a folder of .pt files (one sample each, in name "
                            "order); both models run over every sample first (badcase.txt, "
                            "sample_errors.csv), the layers are then read on the worst one")
    command.add_argument("--max-samples", type=int, metavar="N",
                         help="with --samples: search only the first N samples")
    command.add_argument("--badcase", type=int, metavar="INDEX",
                         help="with --samples: read the layers on this sample (0 is the "
                              "first) instead of the worst")
    command.add_argument("--out", required=True, metavar="DIR",
                         help="new or empty folder (an earlier probe output there is replaced)")
    command.add_argument("--type", default="fake_quant",
                         choices=("fake_quant", "pre_export", "export", "convert"),
                         help="analysis_model_type: which two stages the models are")
    command.add_argument("--stages", metavar="BASELINE,ANALYSIS",
                         help="what the two models are, e.g. float,qat for a trained QAT "
                              "model against its float one (default: the type's pair; for "
                              "fake_quant, qat where --analysis names qat, else calib)")
    command.add_argument("--metric", default="L1",
                         choices=("L1", "MSE", "KL", "ATOL", "Cosine", "SQNR"),
                         help="metric of the sensitivity tables")
    command.add_argument("--no-sensitivity", action="store_true",
                         help="skip the sensitivity pass (one forward per quantizer)")
    command.add_argument("--names", metavar="A,B",
                         help="names of the model outputs, comma-separated")
    command.add_argument("--device",
                         help="run both models there, e.g. cuda:0 (default: where they are)")
    command.add_argument("--try-fixes", action="store_true",
                         help="then try remedies on a copy of the analysis model (16-bit "
                              "activation or weight, fixed scale, per-channel weights, fake "
                              "quant off) and search the fewest layers to set at 16 bits; "
                              "writes fix_trials.yaml")
    command.add_argument("--fix-budget", type=int, default=200, metavar="N",
                         help="forward passes the fix trials may spend (default 200)")
    command.add_argument("--fix-target", metavar="SHARE|KEY=VALUE,...",
                         help="when a fix is good enough: the share of the output error it "
                              "removes (default 0.9), or error_removed=0.9,cosine=0.999 "
                              "(Cosine 0.999 counts too by default)")
    command.add_argument("--fix-metric", default="Cosine", choices=("Cosine", "L1", "MSE"),
                         help="model-output metric of the fix trials (default Cosine)")
    command.add_argument("--save-fixed", metavar="PATH",
                         help="with --try-fixes: save the analysis model with the recommended "
                              "fix set, exactly as measured (torch.save; written as -o is, "
                              "never over an input)")
    command.add_argument("--lang", choices=("zh", "en"),
                         help="language of the summary and progress (default: the locale's; see "
                              "docs/reports.md, Language)")


def run(args, parser) -> int:
    from qcdoctor.engine.commands.progress import Progress
    from qcdoctor.engine.reports.locale_language import chosen_language
    from qcdoctor.text import render as fill
    from qcdoctor.wording import labels
    try:
        from qcdoctor.probe import compare_models
        from qcdoctor.probe.compare import check_out_dir, checked_device, checked_stages
        from qcdoctor.probe.loading import load_inputs, load_model, load_samples
        from qcdoctor.probe.model_match import SELF
        from qcdoctor.probe.samples import checked_badcase, checked_max_samples
        from qcdoctor.probe.sensitivity import check_output_names
    except ImportError as exc:
        raise QcdoctorError(f"qcdoctor probe needs torch ({exc})",
                            fix="pip install torch==2.13.0 (the CPU build is enough)") from None
    lang = chosen_language(args.lang)         # no case here: --lang, else the locale
    words = labels()[lang]["probe"]
    names = [n.strip() for n in args.names.split(",")] if args.names else None
    with _user_code_traced():
        # the options first: loading the models runs the user's code, which can take long
        if names is not None:
            check_output_names(names, args.metric, key="--names")
        checked_device(args.device, key="--device")
        asked, chosen = _stages(args)
        stages = checked_stages(asked, args.type, key="--stages")
        check_out_dir(Path(args.out))
        if args.inputs is not None and (args.max_samples is not None or
                                        args.badcase is not None):
            raise QcdoctorError("--max-samples and --badcase choose among many samples",
                                key="--max-samples" if args.badcase is None else "--badcase",
                                fix="give the samples with --samples FILE_OR_DIR")
        checked_max_samples(args.max_samples, key="--max-samples")
        checked_badcase(args.badcase, key="--badcase")
        if args.save_fixed is not None:
            _check_save_path(args)
        # self: the analysis model with every fake quant off, made by compare_models
        baseline = SELF if args.baseline.strip() == SELF else \
            load_model(args.baseline, "--baseline")
        analysis = load_model(args.analysis, "--analysis")
        inputs = load_inputs(Path(args.inputs)) if args.inputs is not None else \
            load_samples(Path(args.samples))
        _check_badcase_index(args, inputs)
        result = compare_models(baseline, analysis, inputs, Path(args.out),
                                sensitivity=not args.no_sensitivity, metric=args.metric,
                                names=names, analysis_model_type=args.type,
                                device=args.device, progress=Progress(verb=words["progress"]),
                                try_fixes=args.try_fixes, fix_budget=args.fix_budget,
                                fix_target=args.fix_target, fix_metric=args.fix_metric,
                                stages=stages, lang=lang, max_samples=args.max_samples,
                                badcase=args.badcase)
    from qcdoctor.vocabulary import stage_label
    other = "float,calib" if stages == ("float", "qat") else "float,qat"
    lines = [fill(words[f"stages_{chosen}"], {
        "baseline": stage_label(stages[0], lang), "analysis": stage_label(stages[1], lang),
        "type": args.type, "other": other}, lang),
        fill(words["done"], {"rows": len(result.rows), "out": args.out,
                             "files": len(result.files)}, lang)]
    if result.samples is not None:
        lines.append(search_line(result.samples, words, lang))
    if result.baseline_model == SELF:
        lines.append(words["self_baseline"])
    elif result.models_match is not None and not result.models_match["match"]:
        lines.append(fill(words["models_differ"],
                          {"cosine": result.models_match["fake_quant_off_cosine"]}, lang))
    for side, unmatched in (("baseline", result.baseline_only), ("analysis", result.analysis_only)):
        if unmatched:
            lines.append(fill(words["unmatched"], {"count": len(unmatched), "side": words[side],
                                                   "names": ", ".join(unmatched[:8])}, lang))
    for output, rows in result.sensitivity.items():
        if rows:
            lines.append(fill(words["sensitivity"], {"output": output, "metric": args.metric,
                                                     "top": rows[0][0], "value": rows[0][3]},
                              lang))
    if result.fix_trials is not None:
        lines += fix_lines(result.fix_trials, words, lang)
    if args.save_fixed is not None:
        without_qconfig = _save_fixed(result, analysis, Path(args.save_fixed))
        lines.append(fill(words["saved_fixed"], {"path": args.save_fixed}, lang))
        if without_qconfig:
            lines.append(words["saved_without_qconfig"])
    case = _case_folder(Path(args.out))
    lines.append(fill(words["next_in_case"], {"case": str(case)}, lang) if case is not None
                 else fill(words["next"], {"out": args.out}, lang))
    print("\n".join(lines))
    return EXIT_OK


def _check_badcase_index(args, inputs) -> None:
    """--badcase past the samples searched, said before any model runs."""
    from qcdoctor.probe.samples import sample_count
    if args.badcase is None:
        return
    count = sample_count(inputs, args.max_samples)
    if count is not None and args.badcase >= count:
        raise QcdoctorError(f"--badcase {args.badcase} is past the last sample searched "
                            f"({count} samples, 0 to {count - 1})", key="--badcase",
                            fix="give an index below the number of samples (sample_errors.csv "
                                "lists them)")


def search_line(samples: dict, words: dict, lang: str) -> str:
    """The bad-case search in one line: on how many samples the error shows, which sample
    the layers were read on and why."""
    from qcdoctor.text import render as fill
    factor = samples.get("rounding_factor")
    below = samples.get("below_tolerance", samples["shown_on"])
    values = {"count": samples["count"], "shown": samples["shown_on"],
              "tolerance": samples["tolerance_cosine"], "chosen": samples["chosen"],
              "metric": samples["metric"], "output": samples["output"],
              "rank": samples["rank"], "below": below, "factor": f"{factor or 0:g}"}
    if samples["shown_on"]:
        shown = words["search_shown" if factor is None else "search_shown_rounding"]
    else:
        shown = words["search_clean" if below == 0 else "search_within"]
    chosen = words["search_given"] if samples["chosen_by"] == "given" else words["search_worst"]
    return fill(shown, values, lang) + fill(chosen, values, lang)


def _stages(args) -> tuple[tuple[str, ...] | None, str]:
    """(--stages as a pair, "given"); without it, a fake_quant probe whose --analysis names
    qat (a word of MOD:ATTR, e.g. models:qat_model) compares float with qat, not with
    calib ("named"); else the type's own pair (None, "default"). How the pair was chosen
    is the first line the probe prints: a guess is said, with how to give another."""
    if args.stages:
        return tuple(part.strip() for part in args.stages.split(",")), "given"
    if args.type == "fake_quant" and "qat" in re.split(r"[^a-z0-9]+", args.analysis.lower()):
        return ("float", "qat"), "named"
    return None, "default"


def _check_save_path(args) -> None:
    """--save-fixed before any work: with --try-fixes, a place the output writer takes
    (as -o: a file replaced atomically, a pipe), never one of the run's inputs."""
    from qcdoctor.engine.commands.output_file import output_target, same_file
    if not args.try_fixes:
        raise QcdoctorError("--save-fixed saves a measured fix: there is none without "
                            "--try-fixes", key="--save-fixed", fix="add --try-fixes")
    output_target(args.save_fixed)
    if same_file(Path(args.save_fixed), [Path(args.inputs or args.samples)]):
        raise QcdoctorError("refusing to overwrite an input of this run",
                            file=args.save_fixed, key="--save-fixed",
                            fix="give another file name for the fixed model")


def _save_fixed(result, analysis, path: Path) -> bool:
    """The analysis model with the recommended fix set (fix_trials.yaml), saved whole
    through the output writer; nothing saved, one clear error, where no measured fix
    reaches the target. True where the modules' qconfig attributes had to be left out."""
    if result.fix_trials.recommended() is None:
        raise QcdoctorError(f"no measured fix reaches the target: nothing saved to {path}",
                            key="--save-fixed",
                            fix="choose a trial in Python: result.fix_trials.apply(model, "
                                "trial=<index>) (docs/probe.md)")
    from qcdoctor.engine.commands.output_file import write_output
    fixed = result.fix_trials.apply(analysis)
    data, without_qconfig = _saved_bytes(fixed)
    write_output(path, data)
    return without_qconfig


def _saved_bytes(fixed) -> tuple[bytes, bool]:
    """torch.save of ``fixed``, and whether its qconfig attributes were left out: an eager
    model prepared by torch.ao keeps each module's qconfig, whose observer factories are
    local functions pickle cannot save; the forward never reads them."""
    import io

    import torch
    for without_qconfig in (False, True):
        if without_qconfig:
            for module in fixed.modules():
                module.__dict__.pop("qconfig", None)
        buffer = io.BytesIO()
        try:
            torch.save(fixed, buffer)
            return buffer.getvalue(), without_qconfig
        except (AttributeError, TypeError, pickle.PicklingError) as exc:
            failed = exc
    raise QcdoctorError(f"torch cannot save the fixed model ({failed})", key="--save-fixed",
                        fix="set the fix in Python instead: result.fix_trials.apply(model) "
                            "(docs/probe.md)")


def _case_folder(out: Path) -> Path | None:
    """The case folder ``out`` already is in (the nearest folder above it with a
    case.yaml), as the user wrote it; None when there is none."""
    from qcdoctor.collectors.case import CASE_FILE
    for parent in out.parents:
        if (parent / CASE_FILE).is_file():
            return parent
    return None


@contextmanager
def _user_code_traced():
    """With QCDOCTOR_DEBUG set (the internal errors' convention), an error caused by the
    user's own code (a factory, a forward) prints that code's traceback before the
    message."""
    try:
        yield
    except QcdoctorError as exc:
        cause = exc.__cause__
        if os.environ.get("QCDOCTOR_DEBUG") and cause is not None:
            traceback.print_exception(type(cause), cause, cause.__traceback__,
                                      file=sys.stderr)
        raise


def fix_lines(document: dict, words: dict, lang: str) -> list[str]:
    """The summary of fix_trials.yaml: the figure before, the best remedy of one layer,
    the 16-bit set the search found (or why there is none), the caveat."""
    from qcdoctor.text import render as fill
    metric = document["metric"]
    lines = [fill(words["fixes"], {"output": document["output"], "metric": metric,
                                   "before": "—" if document["before"] is None
                                   else document["before"],
                                   "forwards": document["forwards"],
                                   "budget": document["budget"]}, lang)]
    trials = document["trials"]
    # the best remedy: the float trial is the upper bound, named only when nothing else ran
    best = next((t for t in trials if t["fix"] != "float"), trials[0] if trials else None)
    if best is None:
        lines.append(words["fix_none"])
    else:
        lines.append(fill(words["fix_best"], {"fix": words["fix_kinds"][best["fix"]],
                                              "layer": ", ".join(best["layers"]),
                                              "metric": metric, "after": best["after"],
                                              "removed": best["error_removed"]}, lang))
    greedy = document["greedy"]
    if greedy is None:
        codes = [note.partition(":")[0] for note in document["notes"]]
        why = next((words["fix_why"][c] for c in codes if c in words["fix_why"]),
                   words["fix_why"]["other"])
        lines.append(fill(words["fix_no_set"], {"why": why}, lang))
    else:
        layers = greedy["layers"]
        shown = ", ".join(layers[:8]) + (" …" if len(layers) > 8 else "")
        key = "fix_set" if greedy["reached"] else "fix_set_short"
        lines.append(fill(words[key], {"count": len(layers), "names": shown, "metric": metric,
                                       "after": greedy["after"],
                                       "removed": greedy["error_removed"],
                                       "forwards": greedy["forwards"],
                                       "ranked": greedy["ranked"]}, lang))
    before = document.get("before_postprocess")
    if before is not None:
        lines.append(fill(words["fix_before_postprocess"],
                          {"entries": ", ".join(before["entries"][:8])}, lang))
    lines.append(words["fix_caveat"])
    return lines
