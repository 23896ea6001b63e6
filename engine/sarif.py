"""The report as SARIF 2.1.0, for code-scanning dashboards: one result per failed or
unknown checklist item, per pitfall and per finding at or above warning, located at the
file and line its evidence carries (relative to the case folder, base id CASEROOT)."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import quote

from qcdoctor import __version__

from .source_locations import locations

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
CASE_ROOT = "CASEROOT"
_LEVELS = {"error": "error", "warning": "warning", "info": "note"}
_CHECKLIST_LEVELS = {"fail": "error", "unknown": "warning"}


def checklist_lines(item: dict, L: dict) -> list[str]:
    """Why a checklist item has its status: its evidence and finer checks of that status,
    and what to provide when it is unknown."""
    lines = [f"{e['text']} [{e['rule']}]" for e in item["evidence"]
             if e["status"] == item["status"]]
    lines += [f"{L['rolled_up']}{L['colon']}{p['title']}" for p in item.get("parts", [])
              if p["status"] == item["status"]]
    if item.get("provide"):
        lines.append(f"{L['provide']}{L['colon']}{item['provide']}")
    return lines


def sarif_results(report: dict) -> list[dict]:
    """(rule id, short description, level, message, sources) per reported item."""
    from .report import labels
    L = labels()[report["language"]]
    sources_of = {}
    for step in report["trace"]:
        sources_of.setdefault(step["rule"], []).extend(
            f.get("source") for f in step["facts"] if f.get("source"))
    items = []
    for c in report["checklist"]:
        if c["status"] not in _CHECKLIST_LEVELS:
            continue
        text = [f"{c['title']}{L['colon']}{L['checklist_status'][c['status']]}",
                *checklist_lines(c, L)]
        sources = [s for e in c["evidence"] for s in e.get("sources", [])]
        items.append((f"checklist/{c['id']}", c["title"], _CHECKLIST_LEVELS[c["status"]],
                      "\n".join(text), sources or ["case.yaml"]))
    for p in report["pitfalls"]:
        text = f"{p['text']}\n{L['correct_practice']}{L['colon']}{p['correct_practice']}"
        items.append((p["rule"], p["id"], _LEVELS[p.get("severity") or "warning"], text,
                      sources_of.get(p["rule"], [])))
    for f in report["findings"]:
        if f["severity"] == "info":
            continue
        sources = [fact.get("source") for fact in f.get("evidence", {}).values()
                   if isinstance(fact, dict)]
        items.append((f["rule"], f["title"], _LEVELS[f["severity"]],
                      f"{f['title']}{L['colon']}{f['text']}",
                      sources or sources_of.get(f["rule"], [])))
    return items


def sarif_log(report: dict, audit: bool = False) -> dict:
    rules: dict[str, dict] = {}
    results = []
    for rule_id, title, level, text, sources in sarif_results(report):
        if rule_id not in rules:
            rules[rule_id] = {"id": rule_id, "shortDescription": {"text": title}}
        result = {"ruleId": rule_id, "ruleIndex": list(rules).index(rule_id), "level": level,
                  "message": {"text": text}}
        places = [_location(file, line) for file, line in locations(sources)]
        if places:
            result["locations"] = places
        results.append(result)
    conclusion = report["conclusion"]
    run = {"tool": {"driver": {"name": "qcdoctor", "version": __version__,
                               "rules": list(rules.values())}},
           "automationDetails": {"id": f"qcdoctor/{'audit' if audit else 'triage'}/"},
           "language": "zh-CN" if report["language"] == "zh" else "en-US",
           "results": results,
           "properties": {"case": report["case"]["path"], "stage": conclusion["stage"],
                          "determined": conclusion["determined"],
                          "suspect": conclusion["suspect"]}}
    folder = Path(report["case"]["path"])
    if folder.is_dir():
        run["originalUriBaseIds"] = {CASE_ROOT: {"uri": folder.resolve().as_uri() + "/"}}
    return {"$schema": SARIF_SCHEMA, "version": "2.1.0", "runs": [run]}


def _location(file: str, line: int | None) -> dict:
    if Path(file).is_absolute():         # an artefact opened with --allow-outside
        artifact = {"uri": Path(file).as_uri()}
    else:
        artifact = {"uri": quote(file), "uriBaseId": CASE_ROOT}
    physical = {"artifactLocation": artifact}
    if line:
        physical["region"] = {"startLine": line}
    return {"physicalLocation": physical}


def render_sarif(report: dict, audit: bool = False) -> str:
    return json.dumps(sarif_log(report, audit), ensure_ascii=False, indent=2) + "\n"
