"""A report diff (``report_diff``) as Markdown, HTML or JSON, with its verdict in words."""

from __future__ import annotations

import json
from functools import lru_cache

from qcdoctor.vocabulary import CONCLUSION_LABELS, stage_label

DIFF_FORMATS = ("md", "html", "json")


def verdict_text(diff: dict, lang: str) -> str:
    from qcdoctor.wording import labels
    D = labels()[lang]["diff"]
    L = labels()[lang]
    v = diff["verdict"]
    if v["kind"] == "fixed":
        stages = L["list"].join(stage_label(s, lang) for s in v["stages"])
        return D["fixed"].format(stages=stages) if stages else D["fixed_none"]
    if v["kind"] == "moved":
        moved = D["moved"].format(stage=CONCLUSION_LABELS[lang].get(v["stage"], v["stage"]))
        if not v.get("items"):
            return moved
        return moved + L["semicolon"] + D["worse"].format(items=_items(v["items"], diff, lang))
    if v["kind"] == "worse":
        return D["worse"].format(items=_items(v["items"], diff, lang))
    if v["kind"] == "better":
        what = [stage_label(s, lang) for s in v["stages"]]
        if v.get("items"):
            what.append(_items(v["items"], diff, lang))
        return D["better"].format(what=L["list"].join(what) or D["fewer"])
    return D[v["kind"]]


def _items(items: list[dict], diff: dict, lang: str) -> str:
    """What got worse (or better), one after the other: a stage's status or metric
    values, a checklist item's status, a newly reported pitfall in words."""
    from qcdoctor.wording import id_words, labels
    L = labels()[lang]
    D = L["diff"]

    def one(i: dict) -> str:
        if i["kind"] == "pitfall":
            text = next((p for p in diff["pitfalls"]["new"] if p["id"] == i["id"]),
                        {"id": i["id"], "rule": i.get("rule", "")})
            return f"{D['added']}{L['colon']}{_pitfall_words(text, lang)}"
        if i["kind"] == "metric":
            return (f"{stage_label(i['id'], lang)} {i['metric']} "
                    f"{_value(i['old_value'])} → {_value(i['new_value'])}")
        what = stage_label(i["id"], lang) if i["kind"] == "stage" else id_words(i["id"], lang)
        return f"{what} {_status(i['old'], L)} → {_status(i['new'], L)}"
    return L["semicolon"].join(one(i) for i in items)


def _pitfall_words(item: dict, lang: str) -> str:
    """A pitfall named in ``lang``: its words in labels.yaml, else its rule's title."""
    from qcdoctor.wording import id_words
    words = id_words(item["id"], lang)
    return words if words != item["id"] else _rule_title(item, lang)


def _rule_title(item: dict, lang: str) -> str:
    """The title, in ``lang``, of the rule that reported ``item`` (its id's words when
    the rule is not in this rule book)."""
    from qcdoctor.engine.matching.rulebook import rule_by_id
    from qcdoctor.wording import id_words
    rule = rule_by_id(item["rule"]) if item.get("rule") else None
    return rule.title[lang] if rule else id_words(item["id"], lang)


def _in_language(items: list[dict], side_lang: str, lang: str) -> list[dict]:
    """Items taken from a report in ``side_lang``, their text in ``lang``: as the report
    wrote it when the languages agree, else their rule's title in ``lang`` (a JSON
    report holds its texts in its own language only)."""
    if side_lang == lang:
        return items
    return [{**i, "text": _rule_title(i, lang)} for i in items]


def _status(value, L: dict) -> str:
    if value is None:
        return ""
    return (L["checklist_status"].get(value) or L["statuses"].get(value) or str(value))


def _value(value) -> str:
    return "" if value is None else f"{value:.6g}"


def _delta(stage: dict, L: dict) -> str:
    """The change of a stage's value, and whether it is worse, better or within the
    tolerance in the metric's direction (when the reports say which way is better)."""
    if stage["delta"] is None:
        return ""
    trend = stage.get("trend")
    words = f"{L['open']}{L['diff']['trends'][trend]}{L['close']}" if trend else ""
    return f"{stage['delta']:+.6g}{words}"


def view(diff: dict, lang: str) -> dict:
    from qcdoctor.wording import id_words, labels
    L = labels()[lang]
    D = L["diff"]
    stages = [{"label": stage_label(s["stage"], lang), "metric": s["metric"],
               "old": f"{_status(s['old_status'], L)} {_value(s['old_value'])}".strip(),
               "new": f"{_status(s['new_status'], L)} {_value(s['new_value'])}".strip(),
               "delta": _delta(s, L)} for s in diff["stages"]]
    layers = [{"what": f"{c['analysis']}{' ' + c['output'] if c['output'] else ''}"
                       f"{L['colon']}{D['kinds'][c['kind']]}",
               "old": _fields(c["old"], D), "new": _fields(c["new"], D)} for c in diff["layers"]]
    checklist = [{"label": id_words(c["item"], lang), "old": _status(c["old"], L),
                  "new": _status(c["new"], L)} for c in diff["checklist"]]

    def conclusion(side):
        c = diff[side]["conclusion"]
        text = CONCLUSION_LABELS[lang].get(c["stage"], c["stage"])
        text += f"{L['open']}{L['determined_yes'] if c['determined'] else L['determined_no']}"
        if c["suspect"]:
            text += f"{L['semicolon']}{id_words(c['suspect'], lang)}"
        return text + L["close"]
    consistency = diff["consistency"] and {side: _consistency(diff["consistency"][side], L)
                                           for side in ("old", "new")}
    return {"D": D, "L": L, "lang": lang, "diff": diff, "verdict": verdict_text(diff, lang),
            "conclusion": {"old": conclusion("old"), "new": conclusion("new")},
            "stages": stages, "layers": layers, "checklist": checklist,
            "pitfalls": _both_in_language(diff, "pitfalls", lang),
            "missing": _both_in_language(diff, "missing", lang), "consistency": consistency}


def _both_in_language(diff: dict, key: str, lang: str) -> dict:
    """The items of ``key`` gone (from the old report) and new (from the new one), in
    ``lang``; a diff made before reports named their language is taken as it is."""
    return {"gone": _in_language(diff[key]["gone"], diff["old"].get("language", lang), lang),
            "new": _in_language(diff[key]["new"], diff["new"].get("language", lang), lang)}


def _consistency(c: dict | None, L: dict) -> str:
    """The recommendation in the report's words (see report._consistency_line)."""
    if not c:
        return L["diff"]["none"]
    if c["applicable"] is False:
        return L["not_applicable"]
    if c["prerequisites_met"] is False:
        return L["prereq_not_met"]
    if c["level"] is None:
        return L["pending"]
    retrain = L["requires_retrain"] if c["requires_retrain"] else L["no_retrain"]
    return f"{L['level']}{L['colon']}{c['level']}{L['semicolon']}{retrain}"


def _fields(values: dict | None, D: dict) -> str:
    if values is None:
        return D["none"]
    return ", ".join(f"{k}={v}" for k, v in values.items() if v not in (None, ""))


@lru_cache(maxsize=1)
def _environment():
    from qcdoctor.engine.reports.markdown import FILTERS
    from qcdoctor.templating import new_environment
    return new_environment(filters=FILTERS)


def render_diff(diff: dict, fmt: str, lang: str) -> str:
    """The diff as Markdown, HTML or JSON; text from the two reports (titles, layer and
    file names) goes through the one sanitiser, as in a report."""
    from qcdoctor.safe_text import json_text, visible
    if fmt == "json":
        shown = {**diff, "language": lang, "verdict_text": verdict_text(diff, lang),
                 "pitfalls": _both_in_language(diff, "pitfalls", lang),
                 "missing": _both_in_language(diff, "missing", lang)}
        return json_text(json.dumps(shown, ensure_ascii=False, indent=2)) + "\n"
    text = visible(_environment().get_template("diff.md.j2").render(**view(diff, lang)))
    if fmt == "md":
        return text
    import markdown  # only HTML output needs it

    from qcdoctor.templating import render_template
    body = markdown.markdown(text, extensions=["tables"])
    from qcdoctor.wording import labels
    return visible(render_template("page.html.j2", autoescape=True, body=body,
                                   title=labels()[lang]["diff"]["title"], lang=lang))
