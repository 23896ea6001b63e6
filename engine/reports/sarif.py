"""The report as SARIF 2.1.0, for code-scanning dashboards: one result for the stage
conclusion, per failed or unknown checklist item, per pitfall and per finding at or above
warning (info ones too with ``--fail-on info``: whatever fails the run is listed), located
at the files and lines its facts carry as data (``locations``,
common/source_locations.py: relative to the case folder, base id CASEROOT; never read
back from provenance text). Every string is made visible (common/safe_text.py): a viewer
shows it as text."""

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


def counts_for(severity: str | None, fail_on: str | None, default: str) -> bool:
    """Whether an item of ``severity`` is at or above ``fail_on`` (``default`` when
    ``fail_on`` is None or never): the items that fail the run are the ones the CI
    formats flag."""
    from qcdoctor.engine.diagnosis.diagnose import SEVERITY_RANK
    level = fail_on if fail_on in SEVERITY_RANK else default
    return SEVERITY_RANK.get(severity or "", -1) >= SEVERITY_RANK[level]


def _listed(severity: str | None, fail_on: str | None) -> bool:
    """Whether a conclusion or finding is a SARIF result: at or above warning, and at or
    above --fail-on when that is lower (info)."""
    return counts_for(severity, None, "warning") or counts_for(severity, fail_on, "warning")


def bound_facts(report: dict) -> tuple[dict, dict]:
    """The facts each rule's hits bound (rule -> facts), and per (rule, checklist item)
    the facts of the hits that judged that item."""
    facts_of: dict[str, list[dict]] = {}
    checked: dict[tuple[str, str], list[dict]] = {}
    for step in report["trace"]:
        facts_of.setdefault(step["rule"], []).extend(step["facts"])
        item = (step.get("produced") or {}).get("checklist")
        if isinstance(item, dict):
            checked.setdefault((step["rule"], item.get("item")), []).extend(step["facts"])
    return facts_of, checked


def conclusion_item(report: dict, facts_of: dict | None = None) -> dict:
    """The stage conclusion as one CI item: the rule that placed it, its severity, a
    title, the lines that say why (the rule's text, stage, suspect, where it was read,
    the first next action) and its places (file relative to the case folder, line)."""
    from qcdoctor.vocabulary import CONCLUSION_LABELS
    from qcdoctor.wording import id_words, labels
    lang = report["language"]
    L = labels()[lang]
    c = report["conclusion"]
    lead = (c["evidence"] or [{"rule": "", "text": "", "severity": None}])[0]
    if facts_of is None:
        facts_of = bound_facts(report)[0]
    places = fact_locations(facts_of.get(lead["rule"], [])) if lead["rule"] else []
    stage = CONCLUSION_LABELS[lang].get(c["stage"], c["stage"])
    determined = L["determined_yes"] if c["determined"] else L["determined_no"]
    lines = [lead["text"], f"{L['stage']}{L['colon']}{stage}{L['open']}{determined}{L['close']}"]
    if c["suspect"]:
        lines.append(f"{L['suspect']}{L['colon']}{id_words(c['suspect'], lang)}")
    if places:
        where = L["list"].join(f"{file}:{line}" if line else file for file, line in places)
        lines.append(f"{L['ci']['where']}{L['colon']}{where}")
    if report["next_actions"]:
        lines.append(f"{L['ci']['fix']}{L['colon']}{report['next_actions'][0]['text']}")
    return {"rule": lead["rule"], "severity": lead.get("severity"), "stage": c["stage"],
            "title": f"{L['ci']['conclusion']}{L['colon']}{stage}",
            "summary": lead["text"], "text": "\n".join(line for line in lines if line),
            "places": places}


def sarif_results(report: dict, fail_on: str | None = None) -> list[tuple]:
    """(rule id, short description, level, message, locations) per reported item; the
    locations are (file relative to the case folder, line or None)."""
    from qcdoctor.wording import id_words, labels
    L = labels()[report["language"]]
    facts_of, checked = bound_facts(report)
    items = []
    conclusion = conclusion_item(report, facts_of)
    if _listed(conclusion["severity"], fail_on):
        items.append((f"conclusion/{conclusion['stage']}", conclusion["title"],
                      _LEVELS[conclusion["severity"]], conclusion["text"],
                      conclusion["places"] or [("case.yaml", None)]))
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
        items.append((p["rule"], id_words(p["id"], report["language"]),
                      _LEVELS[p.get("severity") or "warning"], text,
                      fact_locations(facts_of.get(p["rule"], []))))
    for f in report["findings"]:
        if not _listed(f["severity"], fail_on):
            continue
        places = fact_locations(f.get("evidence", {}).values())
        items.append((f["rule"], f["title"], _LEVELS[f["severity"]],
                      f"{f['title']}{L['colon']}{f['text']}",
                      places or fact_locations(facts_of.get(f["rule"], []))))
    return items


def sarif_log(report: dict, audit: bool = False, fail_on: str | None = None) -> dict:
    """The SARIF log; with ``fail_on`` (a --fail-on level other than never) its invocation
    carries the exit code that level gives, and every item at or above it is a result."""
    rules: dict[str, dict] = {}
    results = []
    for rule_id, title, level, text, places in sarif_results(report, fail_on):
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
    if fail_on not in (None, "never"):      # as the API renders: no exit code to tell
        from qcdoctor.engine.diagnosis.diagnose import fails_on
        failed = fails_on(report, fail_on)
        from qcdoctor.errors import EXIT_FINDINGS, EXIT_OK
        run["invocations"] = [{"executionSuccessful": True,
                               "exitCode": EXIT_FINDINGS if failed else EXIT_OK}]
        run["properties"].update({"failOn": fail_on, "failed": failed})
    folder = _case_folder(report["case"]["path"])
    if folder is not None:
        run["originalUriBaseIds"] = {CASE_ROOT: {"uri": folder.as_uri() + "/"}}
    return visible_data({"$schema": SARIF_SCHEMA, "version": "2.1.0", "runs": [run]})


def _case_folder(path: str) -> Path | None:
    """The case folder as an absolute path, when the report's path names one here. A report
    read back (``Report.from_dict``) may carry any path: one the system cannot even look up
    (too long, a NUL byte) names no folder, and the run has no base URI."""
    if not path:                # "" would name the working folder
        return None
    try:
        folder = Path(path)
        return folder.resolve() if folder.is_dir() else None
    except (OSError, ValueError):
        return None


def _location(file: str, line: int | None) -> dict:
    """A file relative to the case folder (never absolute, never out of it: see
    common/source_locations.py), percent-encoded: ``;``, spaces and ``#`` stay part of
    the name; a byte that is not UTF-8 (a lone surrogate) is encoded as that byte."""
    artifact = {"uri": quote(file, errors="surrogateescape"), "uriBaseId": CASE_ROOT}
    physical = {"artifactLocation": artifact}
    if line:
        physical["region"] = {"startLine": line}
    return {"physicalLocation": physical}


def render_sarif(report: dict, audit: bool = False, fail_on: str | None = None) -> str:
    return json.dumps(sarif_log(report, audit, fail_on), ensure_ascii=False, indent=2) + "\n"
