"""The view model of a report: what every rendering (Markdown, HTML, terminal) shows,
computed once from the Diagnosis."""

from __future__ import annotations

from qcdoctor.collectors.environment import THIS_MACHINE
from qcdoctor.collectors.metric_direction import metric_key
from qcdoctor.fact_types import LAYER_SEPARATOR, STAGES
from qcdoctor.text import render as fill
from qcdoctor.vocabulary import CONCLUSION_LABELS, is_deployment_problem, stage_label
from qcdoctor.wording import id_words, labels, source_text, suspect_words


def from_this_machine(fact: dict) -> bool:
    return str(fact.get("source", "")).startswith(THIS_MACHINE)


def facts_of(report: dict, ftype: str) -> list[dict]:
    return [f for f in report["facts"] if f["type"] == ftype]


def view_model(report: dict) -> dict:
    lang = report["language"]
    L = labels()[lang]
    sep = L["colon"]

    def label(stage: str) -> str:
        return stage_label(stage, lang)
    stages = {f["stage"]: f for f in facts_of(report, "stage")}
    rows = []
    for s in STAGES:
        f = stages.get(s)
        if not f or (f["status"] == "unknown" and f["source"] == "not given"):
            continue
        rows.append({"label": label(s), "status": L["statuses"][f["status"]], "state": f["status"],
                     "metric": f.get("metric") or "", "value": f"{f['value']:.6g}" if f["has_value"] else "",
                     "note": _basis(f, L, lang), "source": source_text(f["source"], lang)})
    platform = (facts_of(report, "platform") or [{}])[0]

    def machine(fact: dict) -> str:
        return f"{L['open']}{L['this_machine']}{L['close']}" if from_this_machine(fact) else ""
    versions = [f"{v['package']} {v['version']}{machine(v)}" if v["known"]
                else f"{v['package']} {L['not_given']}" for v in facts_of(report, "version")]
    plat = (f"{platform.get('chip')} / {platform.get('march')}{machine(platform)}"
            if platform.get("known") else L["not_given"])
    case = (facts_of(report, "case") or [{}])[0]
    kinds = [id_words(f["kind"], lang) for f in facts_of(report, "evidence")]
    checks = []
    # a run whose folder holds no readable output counts as not run (knowledge.md §16 R3.4)
    absent = {f["out_dir"]: f["problem"] for f in facts_of(report, "analysis_absent")}
    for run in facts_of(report, "analysis_run"):
        checks.append(f"{L['analysis_runs']} {run['analysis_model_type']}{sep}"
                      f"{label(run['baseline'])}{L['versus']}{label(run['analysis'])}"
                      f"{L['open'] + run['out_dir'] + L['close'] if run['out_dir'] else ''}"
                      f"{L['semicolon']}"
                      f"{L['sensitivity_yes'] if run['sensitivity'] else L['sensitivity_no']}"
                      + (L["outputs_absent"].format(why=id_words(absent[run["out_dir"]], lang))
                         if run["out_dir"] in absent else ""))
    postprocess = case.get("postprocess_in_model", "unknown")
    if (checks or facts_of(report, "qa_folder")) and postprocess != "unknown":
        # how the analyses were run; not stated, it is asked for, not listed as a check
        checks.append(L["postprocess_in_model"][postprocess])
    user = [f"{id_words(u['check'], lang)}{L['open']}{L[u['value']]}{L['close']}"
            for u in facts_of(report, "user_check") if u["value"] != "unknown"]
    if user:
        checks.append(f"{L['user_checks']}{sep}{L['semicolon'].join(user)}")
    history = (facts_of(report, "consistency_history") or [{}])[0]
    tried = [L["level_named"].format(n=i) for i in range(3) if history.get(f"tried_{i}")]
    fixes = f"{L['levels_tried']}{sep}{', '.join(tried)}" if tried else L["no_fixes"]
    stage = report["conclusion"]["stage"]
    folders = _qa_folders(report, L, lang)
    qa = (L["qa_not_applicable"] if is_deployment_problem(stage, report["conclusion"]["suspect"],
                                                   report["facts"]) else
          ("" if folders else L["qa_none"]))
    sources = {}
    for t in report["trace"]:
        sources.setdefault(t["rule"], [f.get("source") for f in t["facts"] if f.get("source")])
    # the evidence with where each line was read, on a copy: rendering never changes the
    # report it is given (the same report is rendered again, or saved as JSON)
    evidence = [{**e, "sources": e.get("sources", sources.get(e["rule"], []))}
                for e in report["conclusion"]["evidence"]]
    report = {**report, "conclusion": {**report["conclusion"], "evidence": evidence}}
    view = {
        "r": report, "L": L, "lang": lang, "sep": sep,
        "src": lambda values: L["semicolon"].join(source_text(v, lang) for v in values),
        "stage_label": CONCLUSION_LABELS[lang][stage],
        "suspect_text": _suspect_text(report, L, lang),
        "normal": L["list"].join(label(s) for s in STAGES
                                 if stages.get(s, {}).get("status") == "normal"),
        "abnormal": L["list"].join(label(s) for s in STAGES
                                   if stages.get(s, {}).get("status") == "abnormal"),
        "stage_rows": rows,
        "directions": _directions(stages, L),
        "platform_text": f"{plat}{L['semicolon']}{L['semicolon'].join(versions)}",
        "badcase": _badcase_text(report, case, L, lang),
        "evidence_kinds": L["list"].join(kinds) or L["not_given"],
        "checks": checks, "fixes_applied": fixes, "qa_summary": qa, "qa_folders": folders,
        "located": _located(report, folders, L, lang),
        "thresholds": _thresholds_line(report, lang),
        "thresholds_every": _thresholds_line(report, lang, every=True),
        "consistency_line": _consistency_line(report, L),
        "rules_fired": list(dict.fromkeys(t["rule"] for t in report["trace"])),
        "needed": _needed(report, L, lang),
        "fix_trials": fix_trials_view(report, L, lang),
        # an id (action kind, pitfall, checklist item) in the words of the report language
        "words": lambda value: id_words(value, lang),
        "consistency_step": consistency_step(report),
    }
    step = view["consistency_step"]     # where the strategy's paragraph already stands
    view["consistency_pointer"] = (L["see_smallest"] if step == 1 else
                                   L["see_step"].format(step=step) if step else None)
    return view


def _suspect_text(report: dict, L: dict, lang: str) -> str:
    """The likely cause: a failed checklist item says what failed, with the values its
    failing evidence names."""
    suspect = report["conclusion"]["suspect"]
    failing = next((c for c in report["checklist"] if c["id"] == suspect and c["status"] == "fail"),
                   None)
    words = suspect_words(suspect, [failing["id"]] if failing else [], lang)
    values = next((e["text"] for e in (failing or {}).get("evidence", [])
                   if e["status"] == "fail"), "")
    return f"{words}{L['open']}{values.rstrip('.。')}{L['close']}" if values else words


# trials listed per folder in the reports' tables and chart (the JSON has every one)
FIX_TRIALS_SHOWN = 15


def _percent(share: float) -> str:
    return f"{share:.1%}"


def fix_trials_view(report: dict, L: dict, lang: str) -> list[dict]:
    """Per fix_trials.yaml read (the report's ``fix_trials``): its heading line, the best
    trials as table rows, the greedy set, the notes and the caveats, in the report's words;
    ``plot_id`` names its chart in the HTML report."""
    F = L["fixes"]
    out = []
    for index, run in enumerate(report.get("fix_trials") or []):
        metric, target = run["metric"], run["target"]
        cosine = F["cosine"].format(cosine=f"{target['cosine']:.6g}") if "cosine" in target else ""
        # filled as rule messages are: a name from the file never brings a backtick
        head = fill(F["head"], {"analysis": run["analysis"], "source": run["source"],
                                "output": str(run["output"]), "metric": metric,
                                "before": "—" if run["before"] is None
                                else f"{run['before']:.6g}",
                                "target": _percent(target["error_removed"]), "cosine": cosine,
                                "forwards": run["forwards"], "budget": run["budget"],
                                "candidates": len(run["candidates"])}, lang)
        rows = [{"fix": F["fix"][t["fix"]], "layers": L["list"].join(t["layers"]),
                 "after": f"{t['after']:.6g}", "removed": _percent(t["error_removed"]),
                 "forwards": str(t["forwards"]), "reaches": t["reaches"]}
                for t in run["trials"][:FIX_TRIALS_SHOWN]]
        hidden = len(run["trials"]) - len(rows)
        greedy = run.get("greedy")
        greedy_line = F["greedy_none"] if greedy is None else fill(
            F["greedy" if greedy.get("ranked") is None else "greedy_ranked"], {
            "size": len(greedy["layers"]), "fix": F["fix"][greedy["fix"]], "metric": metric,
            "after": f"{greedy['after']:.6g}", "removed": _percent(greedy["error_removed"]),
            "forwards": greedy["forwards"], "ranked": greedy.get("ranked"),
            "reached": F["reached"] if greedy["reached"] else F["not_reached"],
            "layers": L["list"].join(greedy["layers"])}, lang)
        out.append({"name": run["analysis"], "head": head, "rows": rows,
                    "col_after": F["col_after"].format(metric=metric),
                    "more": F["more"].format(count=hidden) if hidden > 0 else "",
                    "empty": F["no_trials"] if not rows else "", "greedy": greedy_line,
                    "notes": list(run["notes"]),
                    "caveats": [F["caveat"][c] for c in run["caveats"]],
                    "plot_id": f"plot-fixes-{index}"})
    return out


# next actions that wait for something only the user can give (a stage result, a bad
# case, the metric's direction, values restated on one scale): the verifying kinds of
# class 1; a remedy or an analysis is work to do, not an input
_WAITING_KINDS = ("provide_info", "evaluate_stage")
_WAITING_COST = "verify"


def _needed(report: dict, L: dict, lang: str) -> list[dict]:
    """Everything the report waits for from the user: the missing items, the questions the
    rules ask, the actions that need an input and the checklist items still unknown
    (knowledge.md §16 R3.4: never "none" while one of them waits)."""
    asked_by, named = _asking_rules(report)
    return ([_item(m["id"], m["question"], m.get("rule", ""), m.get("why", ""))
             for m in report["missing"]]
            + _asked(report, asked_by, lang)
            + [_item(a["id"], a["text"], a["rule"]) for a in report["next_actions"]
               if waits_for_input(a) and a["rule"] not in named]
            + [_item(c["id"], f"{c['title']}{L['colon']}{c['provide']}")
               for c in report["checklist"] if c.get("provide")]
            + _postprocess_unstated(report, L))


def waits_for_input(action: dict) -> bool:
    """An action that waits for an input only the user can give."""
    return action["kind"] in _WAITING_KINDS and action.get("cost") == _WAITING_COST \
        and not action.get("remedy")


def _postprocess_unstated(report: dict, L: dict) -> list[dict]:
    """QuantAnalysis run or read without knowing whether post-processing was inside the
    analysed model (the two give different tables): asked for as postprocess_in_model.
    Not where every folder's per-layer table was read: its rows show the model's selection
    ops or their absence (a classifier's table holds none), which the reading used."""
    case = (facts_of(report, "case") or [{}])[0]
    if case.get("postprocess_in_model", "unknown") != "unknown" or \
            not (facts_of(report, "qa_folder") or facts_of(report, "analysis_run")):
        return []
    read = {f["analysis"] for f in facts_of(report, "layer_table")}
    folders = [f["analysis"] for f in facts_of(report, "qa_folder")]
    folders += [run["out_dir"] for run in facts_of(report, "analysis_run")]
    if folders and all(name in read for name in folders):
        return []
    return [_item("postprocess_in_model", L["postprocess_in_model"]["ask"])]


def _item(item_id: str, text: str, rule: str = "", why: str = "") -> dict:
    return {"id": item_id, "text": text, "why": why, "rule": rule}


def _asking_rules(report: dict) -> tuple[dict[str, str], set[str]]:
    """(question topic -> the rule that asked it, rules whose input a missing item or a
    question names already)."""
    asked_by: dict[str, str] = {}
    named = set()
    for step in report.get("trace") or []:
        produced = step.get("produced") or {}
        if produced.get("ask"):
            asked_by.setdefault(produced["ask"], step["rule"])
        if produced.get("ask") or produced.get("missing"):
            named.add(step["rule"])
    return asked_by, named


def _asked(report: dict, asked_by: dict[str, str], lang: str) -> list[dict]:
    """The questions the rules ask, not already missing items: the asking rule's action
    where it waits for an input (it says what to provide and how), else the intake's
    question (a rule that proposes work and asks a question beside it, such as level 1
    and the levels tried, keeps its action among the actions)."""
    missing = {m["id"] for m in report["missing"]}
    action_of: dict[str, dict] = {}
    for action in report["next_actions"]:
        if waits_for_input(action):
            action_of.setdefault(action["rule"], action)
    items = []
    for topic in report.get("ask", []):
        rule = asked_by.get(topic, "")
        if topic.split(":")[0] in missing:
            continue
        if rule in action_of:
            items.append(_item(action_of[rule]["id"], action_of[rule]["text"], rule))
        elif _question_text(topic, lang):
            items.append(_item(topic, _question_text(topic, lang), rule))
    return items


def _question_text(topic: str, lang: str) -> str:
    # the question catalogue, on first use
    from qcdoctor.engine.intake.questions import questions_for
    return " / ".join(q.prompt(lang) for q in questions_for(topic))


def _thresholds_line(report: dict, lang: str, every: bool = False) -> str:
    """The thresholds the reading used that the case or project set, in words with their
    values and where they came from; the rest named as the defaults (docs/triage.md) once,
    not sixteen figures in every report (``every``: all of them, each in words)."""
    L = labels()[lang]
    words = L["threshold_words"]
    sources = report.get("threshold_sources", {})
    sep = "；" if lang == "zh" else "; "
    used = {k: v for k, v in report.get("thresholds", {}).items() if k in words}
    set_here = [k for k in used if sources.get(k, "default") != "default"]
    if every:
        return sep.join(words[k].format(v=f"{v:g}") + (
            f" ({source_text(sources[k], lang)})" if k in set_here else "") for k, v in used.items())
    if not set_here:
        return L["thresholds_default"]
    return sep.join([words[k].format(v=f"{used[k]:g}") + f" ({source_text(sources[k], lang)})"
                     for k in set_here] + [L["thresholds_rest"]])


def _qa_folders(report: dict, L: dict, lang: str) -> list[dict]:
    """Per QuantAnalysis folder: comparison, first abnormal layer, error kind, worst, top ops."""
    out = []
    for folder in facts_of(report, "qa_folder"):
        name = folder["analysis"]

        def one(ftype, name=name):
            return next((f for f in facts_of(report, ftype) if f.get("analysis") == name), None)
        lines = [L["qa"]["from_probe"], L["qa"]["flow"][folder.get("flow", "other")]] \
            if folder.get("origin") == "probe" else []
        origin, worst = one("layer_origin"), one("layer_worst")
        kinds = [f for f in facts_of(report, "error_kind") if f.get("analysis") == name]
        if origin:
            shown = {**origin, "pattern": id_words(origin["pattern"], lang),
                     "where": source_text(origin["source"], lang)}
            # accumulation names where it starts, not a source (knowledge.md §16 R3.8)
            label = "origin" if origin.get("located", True) else "accumulation"
            lines.append(fill(L["qa"][label], shown, lang))
            if origin.get("second_layer"):
                lines.append(fill(L["qa"]["second"], shown, lang))
        elif one("layer_table"):
            lines.append(fill(L["qa"]["no_origin"], one("layer_table"), lang))
        for kind in kinds:              # the origin's, then a second source's
            if kind["kind"] != "unclear":
                lines.append(fill(L["qa"][_kind_label(kind)], kind, lang))
        if worst and worst["has_origin"] and not worst["is_origin"]:
            lines.append(fill(L["qa"]["worst"],
                              {**worst, "where": source_text(worst["source"], lang)}, lang))
        for sens in (f for f in facts_of(report, "sensitivity_summary") if f["analysis"] == name):
            lines.append(fill(L["qa"]["sensitivity"],
                              {**sens, "where": source_text(sens["source"], lang)}, lang))
        search = one("sample_search")
        if search:
            lines.append(_sample_search_line(search, L, lang))
        comparison = folder["comparison"]
        if folder["baseline"]:
            comparison += (f"{L['colon']}{stage_label(folder['baseline'], lang)}{L['versus']}"
                           f"{stage_label(folder['analysis_stage'], lang)}")
        out.append({"name": name, "comparison": comparison,
                    "known_from": id_words(folder["known_from"], lang), "lines": lines})
    return out


def _badcase_text(report: dict, case: dict, L: dict, lang: str) -> str:
    """The case's bad case in words; where a probe's search in the folder found it, which
    search and its worst sample (case.yaml may say otherwise: the folder shows it)."""
    words = id_words(case.get("badcase", "unknown"), lang)
    found = next((f for f in facts_of(report, "sample_search") if f["shown"] != "none"), None)
    if found is None:
        return words
    # the worst by the search's metric, not the sample a --badcase chose (it may be clean)
    return fill(L["badcase_found"], {"words": words, "analysis": found["analysis"],
                                     "sample": found["metric_worst"]}, lang)


def _sample_search_line(search: dict, L: dict, lang: str) -> str:
    """A probe's bad-case search in figures, the text of its plot: the chosen output's
    median and worst Cosine over the samples, on how many the error shows, the sample the
    layers were read on."""
    Q = L["qa"]
    worst = search["worst_known"]
    return fill(Q["samples"], {
        "output": search["output"], "count": search["count"],
        "median": f"{search['median_cosine']:.6g}" if search["median_known"] else L["unknown"],
        "worst": f"{search['worst_cosine']:.6g}" if worst else L["unknown"],
        "worst_at": fill(Q["samples_worst_at"], {"sample": search["worst_sample"]}, lang)
        if worst else "",
        "shown_on": search["shown_on"],
        "when": fill(Q["samples_when_rounding" if search["rounding_known"] else "samples_when"],
                     {"tolerance": f"{search['tolerance_cosine']:.6g}",
                      "factor": f"{search['rounding_factor']:g}",
                      "below": search["below_tolerance"]}, lang),
        "chosen": search["chosen"],
        "nonfinite": fill(Q["samples_nonfinite"], {"count": search["nonfinite"]}, lang)
        if search["nonfinite"] else "",
        "from_manifest": Q["samples_manifest"] if search["cosines_from"] == "manifest" else ""},
        lang)


def _located(report: dict, folders: list[dict], L: dict, lang: str) -> list[str]:
    """What the layer reading found, for the summary's first lines: per folder that speaks
    for the located step, the layer (its error kind) and the measured fix, or that none was
    measured; a case holding only a probe's output leads with it, not with its stage."""
    words, lines = L["located"], []
    comparisons = {f["name"]: f["comparison"] for f in folders}
    # a probe's folder without trials: the same command measures them (--try-fixes)
    probed = {f["analysis"] for f in facts_of(report, "qa_folder") if f.get("origin") == "probe"}
    for origin in facts_of(report, "layer_origin"):
        name = origin["analysis"]
        if not origin.get("drives", True) or name not in comparisons:
            continue
        kind = next((k["kind"] for k in facts_of(report, "error_kind")
                     if k["analysis"] == name and k["layer"] == origin["layer"]), "unclear")
        shown = {"layer": origin["layer"], "analysis": name, "comparison": comparisons[name],
                 "kind": words["kinds"].get(kind, kind)}
        line = fill(words["layer" if origin.get("located", True) else "accumulation"], shown,
                    lang)
        trials = next((f for f in facts_of(report, "fix_trials") if f["analysis"] == name),
                      None)
        fix = _measured_fix(trials, words, L, lang) if trials is not None else \
            words["fix_none"] if name in probed else ""
        lines.append(line + L["semicolon"] + fix if fix else line)
    return lines


def _measured_fix(trials: dict, words: dict, L: dict, lang: str) -> str:
    """The fix the probe measured to reach its target (a single layer's, else the greedy
    set's), or that none reached it."""
    if trials.get("single_reaches"):
        fix, layers, removed = trials["single_fix"], trials["single_layer"], \
            trials["single_removed"]
    elif trials.get("greedy_reached") and trials.get("greedy_deployable"):
        fix, layers, removed = trials["greedy_fix"], trials["greedy_layers"], \
            trials["greedy_removed"]
    else:
        return words["fix_not_reached"]
    return fill(words["fix"], {"fix": id_words(fix, lang),
                               "layers": L["list"].join(layers.split(LAYER_SEPARATOR)),
                               "removed": _percent(removed)}, lang)


def _kind_label(kind: dict) -> str:
    """The label of an error kind: truncation judged by the width alone (no zero point for
    an unsigned dtype) has its own wording, as its range's ends are unknown."""
    if kind["kind"] == "truncation" and not kind.get("range_placed", True):
        return "kind_truncation_width"
    return "kind_" + kind["kind"]


def _basis(stage_fact: dict, L: dict, lang: str) -> str:
    basis = stage_fact.get("basis")
    if not basis:
        return L["basis"]["given"] if stage_fact["status"] != "unknown" else ""
    loss = stage_fact.get("basis_drop", 0)
    if basis == "compared":
        # a loss below zero is an improvement, written as one (never "drop -0.001")
        basis += "_improved" if loss < 0 else \
            ("_abnormal" if stage_fact["status"] == "abnormal" else "_normal")
        # a lower-is-better metric rises when it gets worse: say so, not "drop"
        basis += "_lower" if stage_fact.get("direction") == "lower" else ""
    decimals = stage_fact.get("basis_decimals")
    shown = (lambda v: f"{v:.{decimals}f}") if decimals is not None else (lambda v: f"{v:.4g}")
    return L["basis"][basis].format(ref=stage_label(stage_fact["reference"], lang),
                                    drop=shown(loss), gain=shown(-loss),
                                    limit=f"{stage_fact.get('basis_limit', 0):.4g}") \
        + _step(stage_fact, L, lang)


def _step(stage_fact: dict, L: dict, lang: str) -> str:
    """A stage after the first abnormal one, against the evaluated stage before it as well
    as against its reference (knowledge.md §16 R3.3); "" for the others."""
    if not stage_fact.get("step_from"):
        return ""
    loss, limit = stage_fact["step_drop"], stage_fact["step_limit"]
    # as collectors/stages.py decides it: a loss equal to the tolerance is within it
    key = "step_improved" if loss < 0 else (
        "step_further" if loss > limit + 1e-9 else "step_within")
    key += "_lower" if stage_fact.get("direction") == "lower" else ""
    decimals = stage_fact["step_decimals"]
    return L["basis"][key].format(prev=stage_label(stage_fact["step_from"], lang),
                                  drop=f"{loss:.{decimals}f}", gain=f"{-loss:.{decimals}f}",
                                  limit=f"{limit:.4g}")


def _directions(stages: dict, L: dict) -> list[str]:
    """The metric direction used for each compared metric, and why (knowledge.md §5 rev 2);
    one line per metric however its name is spelt (``mAP``, ``map``: R4.9)."""
    seen = {}
    for f in stages.values():
        if f.get("direction"):
            metric = f.get("metric") or (stages.get(f["reference"], {}).get("metric")) or "-"
            seen.setdefault((metric_key(metric), f["direction"], f["direction_from"]), metric)
    return [L["direction"].format(metric=m, way=L["direction_way"][d], why=L["direction_why"][w])
            for (_, d, w), m in seen.items()]


def _consistency_line(report: dict, L: dict) -> str:
    c = report["consistency"]
    if not c:
        return ""
    if c["applicable"] is False:
        return L["not_applicable"]
    if c["applicable"] is None or c["prerequisites_met"] is None and c["level"] is None:
        return L["pending"]
    if c["prerequisites_met"] is False:
        return L["prereq_not_met"]
    if c["level"] is None:
        return L["pending"]
    text = f"{L['level']}{L['colon']}{c['level']}"
    plugin = next((v for v in facts_of(report, "version")
                   if v["package"] == "horizon-plugin-pytorch"), None)
    if c.get("old_level") is not None and (plugin is None or plugin["meets"] != "yes"):
        text += f"{L['open']}{L['old_numbering']} {c['old_level']}{L['close']}"
    text += f"{L['semicolon']}{L['requires_retrain'] if c['requires_retrain'] else L['no_retrain']}"
    return text


DEPLOY_FINDING_PREFIXES = ("DP",)


def consistency_step(report: dict) -> int | None:
    """The number of the next step that already says what the strategy's rule says (the
    same rule, the same text), so the strategy section points at it instead of repeating
    the paragraph; None when no step does."""
    consistency = report.get("consistency")
    if not consistency:
        return None
    return next((i for i, a in enumerate(report["next_actions"], 1)
                 if a["rule"] == consistency["rule"] and a["text"] == consistency["text"]), None)


def audit_view(report: dict) -> dict:
    """What every rendering of an audit shows beside the view model: the items per status,
    the deployment findings and the items still unknown."""
    from qcdoctor.engine.diagnosis.checklist_counts import checklist_counts
    counts = checklist_counts(report)                   # as the intake and the batch count
    words = labels()[report["language"]]
    summary = words["audit_summary"].format(**counts)
    if counts["rolled_up"]:         # the table has these rows more than the count: say why
        summary += words["audit_rolled_up"].format(**counts)
    return {"counts": counts, "audit_summary": summary,
            "deploy_findings": [f for f in report["findings"]
                                if f["rule"].startswith(DEPLOY_FINDING_PREFIXES)],
            "unknown_items": [c for c in report["checklist"] if c["status"] == "unknown"]}


def failed_first(checklist: list[dict]) -> list[dict]:
    """Checklist items, worst status first (fail, unknown, pass, n/a), else in order."""
    from qcdoctor.engine.matching.derived import STATUS_RANK
    return sorted(checklist, key=lambda c: -STATUS_RANK[c["status"]])
