"""Render a Diagnosis (the report dict) as Markdown, HTML or JSON."""

from __future__ import annotations

import json
import re
from functools import lru_cache
from importlib import resources

import yaml

from .fact_types import STAGES
from .templating import new_environment, render_template
from .text import render as fill
from .vocabulary import CONCLUSION_LABELS, STAGE_LABELS

FORMATS = ("md", "html", "json")


@lru_cache(maxsize=1)
def labels() -> dict:
    text = (resources.files("qcdoctor.templates") / "labels.yaml").read_text(encoding="utf-8")
    return yaml.safe_load(text)


# control characters (terminal escapes) and bidirectional overrides in case text would
# act on the reader's terminal or reorder what is shown: they are shown as U+FFFD
_HIDDEN = {c: "\ufffd" for c in [*range(0x20), *range(0x7f, 0xa0), *range(0x202a, 0x202f),
                                  *range(0x2066, 0x206a)]}


def _one_line(value) -> str:
    return " ".join(str(value).split()).translate(_HIDDEN)


# Every string from a case reaches the reports through the filters below, so that no
# renderer (a Markdown viewer, or Python-Markdown for --format html) ever takes user
# text for markup: & and < become entities (no tag, no entity can start), Markdown
# specials are backslashed (only escapes both CommonMark and Python-Markdown honour:
# "[" is enough to stop links and images), and code stays code.
_ENTITIES = {"&": "&amp;", "<": "&lt;", "~": "&#126;"}
_BACKSLASHED = set("\\`*[")
_LINE_START = re.compile(r"^([#+>-]|\d+[.)])")


def _md_prose(text: str, at_start: bool = True, cell: bool = False) -> str:
    out = []
    for i, ch in enumerate(text):
        if ch in _ENTITIES:
            out.append(_ENTITIES[ch])
        elif ch in _BACKSLASHED or (cell and ch == "|"):
            out.append("\\" + ch)
        elif ch == "_" and not (0 < i < len(text) - 1 and text[i - 1].isalnum()
                                and text[i + 1].isalnum()):
            out.append("\\_")                 # intraword _ is never emphasis
        else:
            out.append(ch)
    escaped = "".join(out)
    if at_start:                               # a list item or heading only at the start
        escaped = _LINE_START.sub(lambda m: m.group(1)[:-1] + "\\" + m.group(1)[-1], escaped)
    return escaped


def md_text(value, cell: bool = False) -> str:
    """User text: every character shown as it is."""
    return _md_prose(_one_line(value), cell=cell)


def md_message(value, cell: bool = False) -> str:
    """A rendered rule message: its `code` spans (values in them cannot hold a backtick,
    see engine/text.py) stay code; everything else is shown as it is."""
    parts = _one_line(value).split("`")
    if len(parts) % 2 == 0:                    # unbalanced: no code at all
        return md_text(value, cell)
    out = []
    for i, part in enumerate(parts):
        if i % 2 and part.strip() and not (cell and "|" in part):
            out.append(f"`{part}`")            # code span content is literal everywhere
        elif i % 2:
            out.append(_md_prose(f"`{part}`", at_start=False, cell=cell))
        else:
            out.append(_md_prose(part, at_start=i == 0, cell=cell))
    return "".join(out)


def md_code(value) -> str:
    return f"`{_one_line(value).replace('`', chr(39))}`"


def md_fenced(code: str, lang: str = "python") -> str:
    """A fenced block no line of ``code`` can close: the fence outruns its backticks."""
    longest = max((len(run) for run in re.findall(r"`+", code)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{lang}\n{code}{fence}"


FILTERS = {"t": md_message, "u": md_text, "c": md_code, "fenced": md_fenced,
           "cell": lambda v: md_message(v, cell=True)}


def _facts_of(report: dict, ftype: str) -> list[dict]:
    return [f for f in report["facts"] if f["type"] == ftype]


def view_model(report: dict) -> dict:
    lang = report["language"]
    L = labels()[lang]
    stages = {f["stage"]: f for f in _facts_of(report, "stage")}
    rows = []
    for s in STAGES:
        f = stages.get(s)
        if not f or (f["status"] == "unknown" and f["source"] == "not given"):
            continue
        rows.append({"label": STAGE_LABELS[s], "status": L["statuses"][f["status"]],
                     "metric": f.get("metric") or "", "value": f"{f['value']:.6g}" if f["has_value"] else "",
                     "note": _basis(f, L), "source": f["source"]})
    platform = (_facts_of(report, "platform") or [{}])[0]
    versions = [f"{v['package']} {v['version']}" if v["known"] else f"{v['package']} {L['not_given']}"
                for v in _facts_of(report, "version")]
    plat = (f"{platform.get('chip')} / {platform.get('march')}" if platform.get("known")
            else L["not_given"])
    case = (_facts_of(report, "case") or [{}])[0]
    kinds = [f["kind"] for f in _facts_of(report, "evidence")]
    checks = []
    for run in _facts_of(report, "analysis_run"):
        checks.append(f"{L['analysis_runs']} {run['analysis_model_type']}: "
                      f"{STAGE_LABELS[run['baseline']]} vs {STAGE_LABELS[run['analysis']]}"
                      f"{' (' + run['out_dir'] + ')' if run['out_dir'] else ''}, "
                      f"{L['sensitivity_yes'] if run['sensitivity'] else L['sensitivity_no']}")
    user = [f"{u['check']}={L[u['value']]}" for u in _facts_of(report, "user_check")
            if u["value"] != "unknown"]
    if user:
        checks.append(f"{L['user_checks']}: {', '.join(user)}")
    history = (_facts_of(report, "consistency_history") or [{}])[0]
    tried = [str(i) for i in range(3) if history.get(f"tried_{i}")]
    fixes = f"{L['levels_tried']}: {', '.join(tried)}" if tried else L["no_fixes"]
    stage = report["conclusion"]["stage"]
    folders = _qa_folders(report, L)
    qa = (L["qa_not_applicable"] if stage in ("compile", "user_side") else
          ("" if folders else L["qa_none"]))
    sources = {}
    for t in report["trace"]:
        sources.setdefault(t["rule"], [f.get("source") for f in t["facts"] if f.get("source")])
    for e in report["conclusion"]["evidence"]:
        e.setdefault("sources", sources.get(e["rule"], []))
    return {
        "r": report, "L": L, "lang": lang,
        "stage_label": CONCLUSION_LABELS[lang][stage],
        "normal": [STAGE_LABELS[s] for s in STAGES if stages.get(s, {}).get("status") == "normal"],
        "abnormal": [STAGE_LABELS[s] for s in STAGES if stages.get(s, {}).get("status") == "abnormal"],
        "stage_rows": rows,
        "platform_text": f"{plat}; {'; '.join(versions)}",
        "badcase": case.get("badcase", "unknown"),
        "evidence_kinds": ", ".join(kinds) or L["not_given"],
        "checks": checks, "fixes_applied": fixes, "qa_summary": qa, "qa_folders": folders,
        "thresholds": ", ".join(f"{k}={v:g}" for k, v in report.get("thresholds", {}).items()),
        "consistency_line": _consistency_line(report, L),
        "rules_fired": list(dict.fromkeys(t["rule"] for t in report["trace"])),
    }


def _qa_folders(report: dict, L: dict) -> list[dict]:
    """Per QuantAnalysis folder: comparison, first abnormal layer, error kind, worst, top ops."""
    out = []
    for folder in _facts_of(report, "qa_folder"):
        name = folder["analysis"]

        def one(ftype, name=name):
            return next((f for f in _facts_of(report, ftype) if f.get("analysis") == name), None)
        lines = []
        origin, kind, worst = one("layer_origin"), one("error_kind"), one("layer_worst")
        if origin:
            lines.append(fill(L["qa"]["origin"], {**origin, "where": origin["source"]}))
        elif one("layer_table"):
            lines.append(fill(L["qa"]["no_origin"], one("layer_table")))
        if kind and kind["kind"] != "unclear":
            lines.append(fill(L["qa"]["kind_" + kind["kind"]], kind))
        if worst and worst["has_origin"] and not worst["is_origin"]:
            lines.append(fill(L["qa"]["worst"], {**worst, "where": worst["source"]}))
        for sens in (f for f in _facts_of(report, "sensitivity_summary") if f["analysis"] == name):
            lines.append(fill(L["qa"]["sensitivity"], {**sens, "where": sens["source"]}))
        comparison = folder["comparison"]
        if folder["baseline"]:
            comparison += f": {STAGE_LABELS[folder['baseline']]} vs {STAGE_LABELS[folder['analysis_stage']]}"
        out.append({"name": name, "comparison": comparison, "known_from": folder["known_from"],
                    "lines": lines})
    return out


def _basis(stage_fact: dict, L: dict) -> str:
    basis = stage_fact.get("basis")
    if not basis:
        return L["basis"]["given"] if stage_fact["status"] != "unknown" else ""
    if basis == "compared":
        basis += "_abnormal" if stage_fact["status"] == "abnormal" else "_normal"
    return L["basis"][basis].format(ref=STAGE_LABELS.get(stage_fact["reference"], ""),
                                    drop=f"{stage_fact.get('basis_drop', 0):.4g}",
                                    limit=f"{stage_fact.get('basis_limit', 0):.4g}")


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
    text = f"{L['level']}: {c['level']}"
    plugin = next((v for v in _facts_of(report, "version")
                   if v["package"] == "horizon-plugin-pytorch"), None)
    if c.get("old_level") is not None and (plugin is None or plugin["meets"] != "yes"):
        text += f" ({L['old_numbering']} {c['old_level']})"
    text += f"; {L['requires_retrain'] if c['requires_retrain'] else L['no_retrain']}"
    return text


@lru_cache(maxsize=1)
def _markdown_environment():
    return new_environment(filters=FILTERS)


def render_markdown(report: dict) -> str:
    template = _markdown_environment().get_template("report.md.j2")
    return template.render(**view_model(report))


DEPLOY_FINDING_PREFIXES = ("DP",)


def render_audit_markdown(report: dict) -> str:
    view = view_model(report)
    counts = {s: sum(c["status"] == s for c in report["checklist"])
              for s in ("pass", "fail", "unknown", "not_applicable")}
    view.update(counts=counts,
                deploy_findings=[f for f in report["findings"]
                                 if f["rule"].startswith(DEPLOY_FINDING_PREFIXES)],
                unknown_items=[c for c in report["checklist"] if c["status"] == "unknown"])
    return _markdown_environment().get_template("audit.md.j2").render(**view)


def render_html(report: dict, markdown_text: str | None = None) -> str:
    import markdown  # only HTML output needs it

    body = markdown.markdown(markdown_text if markdown_text is not None else
                             render_markdown(report),
                             extensions=["tables", "fenced_code"])
    title = labels()[report["language"]]["title"]
    return render_template("report.html.j2", autoescape=True, body=body, title=title,
                           lang=report["language"])


def render_json(report: dict) -> str:
    return json.dumps(report, ensure_ascii=False, indent=2) + "\n"


def render(report: dict, fmt: str, audit: bool = False) -> str:
    if fmt == "json":
        return render_json(report)
    if audit:
        if fmt == "html":
            return render_html(report, render_audit_markdown(report))
        return render_audit_markdown(report)
    if fmt == "html":
        return render_html(report)
    return render_markdown(report)
