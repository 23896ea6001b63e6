"""The report as JUnit XML, for CI test dashboards: one testcase for the stage conclusion,
one per checklist item (fail is a failure; unknown and not applicable are skipped) and
per rule judgement (a finding or pitfall). A conclusion or judgement at or above the
``--fail-on`` level (error without one) is a failure, the others pass with their text as
output: the run's exit code and the failures always agree."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from qcdoctor.safe_text import visible

# the characters XML 1.0 cannot hold besides those ``visible`` replaces
_NOT_XML = str.maketrans({"\ufffe": "\ufffd", "\uffff": "\ufffd"})


def _text(value) -> str:
    """User text as the XML holds it: made visible (controls, bidi controls as U+FFFD,
    lone surrogates as escapes; common/safe_text.py), then what XML cannot hold."""
    return visible(value).translate(_NOT_XML)


def junit_cases(report: dict, fail_on: str | None = None) -> list[dict]:
    """Per testcase: classname, name, outcome (passed / failure / skipped), message, text."""
    from qcdoctor.engine.reports.sarif import checklist_lines, conclusion_item
    from qcdoctor.wording import id_words, labels
    L = labels()[report["language"]]
    conclusion = conclusion_item(report)
    cases = [{"classname": "conclusion", "name": conclusion["title"],
              "outcome": _outcome(conclusion["severity"], fail_on),
              "message": conclusion["summary"], "text": conclusion["text"]}]
    for c in report["checklist"]:
        evidence = "\n".join(checklist_lines(c, L))
        outcome = {"fail": "failure", "pass": "passed"}.get(c["status"], "skipped")
        cases.append({"classname": "checklist", "name": f"{c['id']}: {c['title']}",
                      "outcome": outcome, "message": L["checklist_status"][c["status"]],
                      "text": evidence.strip()})
    for kind, items in (("findings", report["findings"]), ("pitfalls", report["pitfalls"]),
                        ("cautions", report.get("cautions", []))):
        for item in items:
            title = item.get("title") or id_words(item["id"], report["language"])
            text = item["text"]
            if item.get("correct_practice"):
                text += f"\n{L['correct_practice']}{L['colon']}{item['correct_practice']}"
            cases.append({"classname": kind, "name": f"{item['rule']}: {title}",
                          "outcome": _outcome(item.get("severity"), fail_on),
                          "message": item.get("severity") or "", "text": text})
    return cases


def _outcome(severity: str | None, fail_on: str | None) -> str:
    from qcdoctor.engine.reports.sarif import counts_for
    return "failure" if counts_for(severity, fail_on, "error") else "passed"


def render_junit(report: dict, audit: bool = False, fail_on: str | None = None) -> str:
    cases = junit_cases(report, fail_on)
    counts = {o: sum(c["outcome"] == o for c in cases) for o in ("failure", "skipped")}
    name = f"qcdoctor {'audit' if audit else 'triage'}: {report['case']['path']}"
    stats = {"tests": str(len(cases)), "failures": str(counts["failure"]), "errors": "0",
             "skipped": str(counts["skipped"])}
    root = ET.Element("testsuites", {"name": "qcdoctor", **stats})
    suite = ET.SubElement(root, "testsuite", {"name": _text(name), **stats})
    for case in cases:
        element = ET.SubElement(suite, "testcase", {"classname": _text(case["classname"]),
                                                    "name": _text(case["name"])})
        if case["outcome"] == "passed":
            if case["text"]:
                ET.SubElement(element, "system-out").text = _text(case["text"])
            continue
        detail = ET.SubElement(element, case["outcome"], {"message": _text(case["message"])})
        if case["outcome"] == "failure":
            detail.set("type", _text(case["classname"]))
        detail.text = _text(case["text"]) or None
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
