"""A report diff (``report_diff``) as Markdown, HTML or JSON, with its verdict in words."""

from __future__ import annotations

import json
from functools import lru_cache

from qcdoctor.vocabulary import CONCLUSION_LABELS, stage_label

DIFF_FORMATS = ("md", "html", "json")


def verdict_text(diff: dict, lang: str) -> str:
    from qcdoctor.wording import id_words, labels
    D = labels()[lang]["diff"]
    L = labels()[lang]
    v = diff["verdict"]
    if v["kind"] == "fixed":
        stages = L["list"].join(stage_label(s, lang) for s in v["stages"])
        return D["fixed"].format(stages=stages) if stages else D["fixed_none"]
    if v["kind"] == "moved":
        return D["moved"].format(stage=CONCLUSION_LABELS[lang].get(v["stage"], v["stage"]))
    if v["kind"] == "worse":
        items = L["semicolon"].join(
            f"{D['added']}{L['colon']}{i['id']}" if i["kind"] == "pitfall" else
            f"{stage_label(i['id'], lang) if i['kind'] == 'stage' else id_words(i['id'], lang)}"
            f" {_status(i['old'], L)} → {_status(i['new'], L)}" for i in v["items"])
        return D["worse"].format(items=items)
    if v["kind"] == "better":
        stages = L["list"].join(stage_label(s, lang) for s in v["stages"])
        return D["better"].format(what=stages or D["fewer"])
    return D[v["kind"]]


def _status(value, L: dict) -> str:
    if value is None:
        return ""
    return (L["checklist_status"].get(value) or L["statuses"].get(value) or str(value))


def _value(value) -> str:
    return "" if value is None else f"{value:.6g}"


def view(diff: dict, lang: str) -> dict:
    from qcdoctor.wording import id_words, labels
    L = labels()[lang]
    D = L["diff"]
    stages = [{"label": stage_label(s["stage"], lang), "metric": s["metric"],
               "old": f"{_status(s['old_status'], L)} {_value(s['old_value'])}".strip(),
               "new": f"{_status(s['new_status'], L)} {_value(s['new_value'])}".strip(),
               "delta": "" if s["delta"] is None else f"{s['delta']:+.6g}"} for s in diff["stages"]]
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
            "pitfalls": diff["pitfalls"], "missing": diff["missing"], "consistency": consistency}


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
        return json_text(json.dumps({**diff, "verdict_text": verdict_text(diff, lang)},
                                    ensure_ascii=False, indent=2)) + "\n"
    text = visible(_environment().get_template("diff.md.j2").render(**view(diff, lang)))
    if fmt == "md":
        return text
    import markdown  # only HTML output needs it

    from qcdoctor.templating import render_template
    body = markdown.markdown(text, extensions=["tables"])
    from qcdoctor.wording import labels
    return visible(render_template("page.html.j2", autoescape=True, body=body,
                                   title=labels()[lang]["diff"]["title"], lang=lang))
