"""The report as SARIF 2.1.0, for code-scanning dashboards: one result per failed or
unknown checklist item, per pitfall and per finding at or above warning, located at the
files and lines its facts carry as data (``locations``, common/source_locations.py:
relative to the case folder, base id CASEROOT; never read back from provenance text).
Every string is made visible (common/safe_text.py): a viewer shows it as text."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import quote

from qcdoctor import __version__
from qcdoctor.safe_text import visible_data
from qcdoctor.source_locations import fact_locations

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


def sarif_results(report: dict) -> list[tuple]:
    """(rule id, short description, level, message, locations) per reported item; the
    locations are (file relative to the case folder, line or None)."""
    from qcdoctor.wording import labels
    L = labels()[report["language"]]
    facts_of: dict[str, list[dict]] = {}               # rule -> the facts its hits bound
    checked: dict[tuple[str, str], list[dict]] = {}    # (rule, checklist item) -> same
    for step in report["trace"]:
        facts_of.setdefault(step["rule"], []).extend(step["facts"])
        item = (step.get("produced") or {}).get("checklist")
        if isinstance(item, dict):
            checked.setdefault((step["rule"], item.get("item")), []).extend(step["facts"])
    items = []
    for c in report["checklist"]:
        if c["status"] not in _CHECKLIST_LEVELS:
            continue
        text = [f"{c['title']}{L['colon']}{L['checklist_status'][c['status']]}",
                *checklist_lines(c, L)]
        rules = dict.fromkeys(e["rule"] for e in c["evidence"])
        places = fact_locations(f for rule in rules for f in checked.get((rule, c["id"]), []))
        items.append((f"checklist/{c['id']}", c["title"], _CHECKLIST_LEVELS[c["status"]],
                      "\n".join(text), places or [("case.yaml", None)]))
    for p in report["pitfalls"] + report.get("cautions", []):
        text = f"{p['text']}\n{L['correct_practice']}{L['colon']}{p['correct_practice']}"
        items.append((p["rule"], p["id"], _LEVELS[p.get("severity") or "warning"], text,
                      fact_locations(facts_of.get(p["rule"], []))))
    for f in report["findings"]:
        if f["severity"] == "info":
            continue
        places = fact_locations(f.get("evidence", {}).values())
        items.append((f["rule"], f["title"], _LEVELS[f["severity"]],
                      f"{f['title']}{L['colon']}{f['text']}",
                      places or fact_locations(facts_of.get(f["rule"], []))))
    return items


def sarif_log(report: dict, audit: bool = False) -> dict:
    rules: dict[str, dict] = {}
    results = []
    for rule_id, title, level, text, places in sarif_results(report):
        if rule_id not in rules:
            rules[rule_id] = {"id": rule_id, "shortDescription": {"text": title}}
        result = {"ruleId": rule_id, "ruleIndex": list(rules).index(rule_id), "level": level,
                  "message": {"text": text}}
        if places:
            result["locations"] = [_location(file, line) for file, line in places]
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
    return visible_data({"$schema": SARIF_SCHEMA, "version": "2.1.0", "runs": [run]})


def _location(file: str, line: int | None) -> dict:
    """A file relative to the case folder (never absolute, never out of it: see
    common/source_locations.py), percent-encoded: ``;``, spaces and ``#`` stay part of
    the name; a byte that is not UTF-8 (a lone surrogate) is encoded as that byte."""
    artifact = {"uri": quote(file, errors="surrogateescape"), "uriBaseId": CASE_ROOT}
    physical = {"artifactLocation": artifact}
    if line:
        physical["region"] = {"startLine": line}
    return {"physicalLocation": physical}


def render_sarif(report: dict, audit: bool = False) -> str:
    return json.dumps(sarif_log(report, audit), ensure_ascii=False, indent=2) + "\n"
